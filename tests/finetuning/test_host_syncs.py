"""The fine-tuning step never makes the host wait for the device, for every task and head: on
a CPU as HostSyncs sees it (the ops a GPU would wait on), on a GPU by torch's own
`set_sync_debug_mode("error")`. The progress log's one read every `log_every` steps is outside
the step."""
from __future__ import annotations

import pytest

from bertkit.finetuning.recipe import finetune
from bertkit.finetuning.tasks import QA, Regress, Tag

RUNS = {  # task (a name: its defaults), model fixture, training file, dev file, options
    "classify": ("classify", "tiny_bert", "train", "dev", {}),
    "classify, modern": ("classify", "tiny_modern", "train", "dev", {}),
    "classify, layer mix": ("classify", "tiny_bert", "train", "dev", {"layer_mix": True}),
    "pair": ("pair", "tiny_bert", "pairs", None, {}),
    "regress": (Regress(label_column="score"), "tiny_bert", "train", "dev", {}),
    "tag": ("tag", "tiny_bert", "ner_train", "ner_dev", {}),
    "tag, crf": (Tag(crf=True), "tiny_modern", "ner_train", "ner_dev", {}),
    "spans": ("spans", "tiny_bert", "ner_train", "ner_dev", {}),
    "qa": (QA(stride=8), "tiny_bert", "squad", None, {"max_length": 32, "dev_fraction": 0.2}),
}


def _run(name, request, task_files, quick_config, tmp_path, **options):
    task, model, train, dev, extra = RUNS[name]
    return finetune(task, request.getfixturevalue(model), task_files[train],
                    task_files[dev] if dev else None, tmp_path / "out",
                    quick_config(epochs=1, batch_size=16, **extra, **options))


@pytest.mark.parametrize("name", RUNS)
def test_the_step_never_makes_the_host_wait(name, step_syncs, request, task_files,
                                            quick_config, tmp_path):
    result = _run(name, request, task_files, quick_config, tmp_path, precision="fp32")
    assert result.steps > 1 and step_syncs.found == []


@pytest.mark.gpu
@pytest.mark.parametrize("name", RUNS)
def test_on_a_gpu_the_step_never_syncs(name, cuda_sync_errors, request, task_files,
                                       quick_config, tmp_path):
    result = _run(name, request, task_files, quick_config, tmp_path, device="cuda")
    assert result.steps > 1
