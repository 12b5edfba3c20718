import json
import os

import pytest

from mmspec.batch import Item, item_seed, read_items, run_batch, write_manifest
from tests.pipelines.test_llamagen_pipeline import tiny_c2i_pipeline


@pytest.fixture(scope="module")
def pipe():
    return tiny_c2i_pipeline()


def test_read_items_from_text_and_jsonl(tmp_path):
    txt = tmp_path / "labels.txt"
    txt.write_text("0\n\n2\n1\n")
    assert [(i.id, i.class_label) for i in read_items(txt, True)] == [("000001", 0), ("000003", 2), ("000004", 1)]
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"id": "cat", "prompt": "a cat"}\n{"prompt": "a dog"}\n')
    assert [(i.id, i.prompt) for i in read_items(jl, False)] == [("cat", "a cat"), ("000002", "a dog")]


@pytest.mark.parametrize(
    "content,message",
    [("", "has no items"), ("zero\n", "class label 'zero' is not an integer")],
)
def test_bad_prompt_files_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "labels.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_items(path, True)
    with pytest.raises(ValueError, match="cannot read prompts file"):
        read_items(tmp_path / "missing.txt", True)


def test_item_seeds_are_deterministic_and_distinct():
    assert item_seed(0, "a") == item_seed(0, "a")
    assert len({item_seed(0, str(i)) for i in range(1000)}) == 1000
    assert item_seed(0, "a") != item_seed(1, "a")


def test_batch_is_resumable_and_sharded_runs_cover_every_item_once(pipe, tmp_path):
    items = [Item(f"{i:03d}", class_label=i % 3) for i in range(7)]
    # two "processes" each take their share; the second is interrupted after its second item
    run_batch(pipe, items, tmp_path, decoding="sjd", rank=0, world_size=2)
    with pytest.raises(KeyboardInterrupt):
        run_batch(pipe, items, tmp_path, decoding="sjd", rank=1, world_size=2,
                  on_item=lambda item, skipped: (_ for _ in ()).throw(KeyboardInterrupt) if item.id == "003" else None)
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path / "images"))
    with pytest.raises(ValueError, match="has no record"):
        write_manifest(tmp_path, items)
    generated = run_batch(pipe, items, tmp_path, decoding="sjd", rank=1, world_size=2)
    assert [i.id for i in generated] == ["005"]  # 001 and 003 were already written
    records = [json.loads(line) for line in write_manifest(tmp_path, items).read_text().splitlines()]
    assert [r["id"] for r in records] == [i.id for i in items]
    assert all((tmp_path / r["file"]).exists() and r["stats"]["tokens_committed"] == 16 for r in records)


def test_an_items_image_does_not_depend_on_sharding(pipe, tmp_path):
    items = [Item(f"{i}", class_label=1) for i in range(3)]
    run_batch(pipe, items, tmp_path / "one", decoding="mc-sjd", seed=5)
    run_batch(pipe, items, tmp_path / "two", decoding="mc-sjd", seed=5, rank=1, world_size=2)
    assert (tmp_path / "one/images/1.png").read_bytes() == (tmp_path / "two/images/1.png").read_bytes()


def test_unwritable_output_is_a_clear_error(pipe, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="is not writable"):
        run_batch(pipe, [Item("0", class_label=0)], blocker / "out")
