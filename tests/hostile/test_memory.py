"""Memory exhausted in any command (not only pretraining): one line, exit 2, no traceback, no
temporary, the previous output as it was. The encoder's first layer fails as the allocator
does: torch.OutOfMemoryError on a GPU, a plain RuntimeError from torch's CPU allocator, a
MemoryError from NumPy or Python."""
from __future__ import annotations

import pytest
import torch

from bertkit.cli.main import main

FAILURES = [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
            RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                         "can't allocate memory: you tried to allocate 4503599627370496 bytes"),
            MemoryError()]


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, world, tools):
    out = tmp_path_factory.mktemp("finetuned") / "clf"
    assert main([str(a) for a in tools.finetune_args(world, out)]) == 0
    return out


def _no_memory(monkeypatch, failure):
    def forward(self, *args, **kwargs):
        raise failure
    monkeypatch.setattr(torch.nn.Embedding, "forward", forward)


@pytest.mark.parametrize("failure", FAILURES, ids=["cuda", "cpu", "numpy"])
@pytest.mark.parametrize("command", ["embed", "finetune", "predict", "evaluate", "fill-mask"])
def test_out_of_memory_in_any_command(command, failure, tmp_path, world, finetuned, tools,
                                      capsys, monkeypatch):
    out = tmp_path / "outputs"
    out.mkdir()
    labelled = tmp_path / "in.jsonl"
    labelled.write_text((world / "dev.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    args = {"embed": ["embed", "--model", world / "model", "--input", world / "lines.txt",
                      "--out", out / "v.npy"],
            "finetune": tools.finetune_args(world, out / "clf"),
            "predict": ["predict", "--model", finetuned, "--input", labelled,
                        "--out", out / "p.jsonl"],
            "evaluate": ["evaluate", "--model", finetuned, "--input", labelled],
            "fill-mask": ["fill-mask", "--model", world / "model", "the [MASK] sat"]}[command]
    (out / "v.npy").write_bytes(b"previous")
    (out / "p.jsonl").write_bytes(b"previous")
    _no_memory(monkeypatch, failure)
    code, err = tools.cli(capsys, *args)
    assert "out of memory" in tools.assert_one_error(code, err)
    assert (out / "v.npy").read_bytes() == b"previous"
    assert (out / "p.jsonl").read_bytes() == b"previous"
    assert tools.leftovers(out) == []
    assert not (out / "clf" / "model.safetensors").exists()
