"""Model cards: a section added below the source's card, and the front matter's fields the hub
files a model by set without touching the rest of it."""
from __future__ import annotations

from bertkit.model.card import card_with_section, with_front_matter
from bertkit.model.hub import hub_name

SOURCE = ("---\nlanguage: en\ntags:\n- sentence-transformers\n- feature-extraction\n"
          "library_name: sentence-transformers\npipeline_tag: sentence-similarity\n"
          "base_model: nreimers/MiniLM-L6-H384-uncased\nlicense: apache-2.0\n---\n\n"
          "# all-MiniLM-L6-v2\nA sentence encoder.\n")


def test_the_fields_are_set_and_the_rest_of_the_front_matter_stays_as_written():
    card = with_front_matter(card_with_section(SOURCE, "Fine-tuned", "On SST."),
                             {"library_name": "transformers",
                              "pipeline_tag": "text-classification", "base_model": None})
    assert card == ('---\nlanguage: en\ntags:\n- sentence-transformers\n- feature-extraction\n'
                    'license: apache-2.0\nlibrary_name: "transformers"\n'
                    'pipeline_tag: "text-classification"\n---\n\n'
                    '# all-MiniLM-L6-v2\nA sentence encoder.\n\n## Fine-tuned\n\nOn SST.\n')


def test_a_card_without_front_matter_gets_one_and_a_value_is_quoted_for_yaml():
    ruled = "# Title\n\n---\n\nA rule above is no front matter.\n"
    assert with_front_matter(ruled, {"base_model": "org/name: v2"}) == \
        '---\nbase_model: "org/name: v2"\n---\n\n' + ruled
    assert with_front_matter(None, {"library_name": "transformers", "base_model": None}) == \
        '---\nlibrary_name: "transformers"\n---\n'


def test_a_hub_name_is_a_base_model_and_a_local_path_is_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub_name("sentence-transformers/all-MiniLM-L6-v2") == \
        "sentence-transformers/all-MiniLM-L6-v2"
    (tmp_path / "runs" / "mini").mkdir(parents=True)
    assert hub_name("runs/mini") is None and hub_name(tmp_path / "runs" / "mini") is None
