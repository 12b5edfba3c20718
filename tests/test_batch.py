import json
import os

import pytest

from mmspec.runs.batch import Item, clear_results, item_seed, read_items, run_batch, write_manifest

from mmspec.io.files import atomic_write
from mmspec.decoding.config import DecodingConfig
from tests.helpers.pipelines import tiny_c2i_pipeline


@pytest.fixture(scope="module")
def pipe():
    return tiny_c2i_pipeline()


def test_read_items_from_text_and_jsonl(tmp_path):
    txt = tmp_path / "labels.txt"
    txt.write_text("0\n\n2\n1\n")
    assert [(i.id, i.class_label) for i in read_items(txt, 3)] == [("000001", 0), ("000003", 2), ("000004", 1)]
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"id": "cat", "prompt": "a cat"}\n{"prompt": "a dog"}\n{"id": 7, "prompt": "a cow"}\n')
    assert [(i.id, i.prompt) for i in read_items(jl, None)] == [("cat", "a cat"), ("000002", "a dog"), ("7", "a cow")]


def test_read_items_resolves_class_names_to_their_labels(tmp_path):
    """Items files took integer labels only, though the pipelines take names."""
    txt = tmp_path / "names.txt"
    txt.write_text("c\n\n 1 \na\n")
    assert [(i.id, i.class_label) for i in read_items(txt, ["a", "b", "c"])] == [("000001", 2), ("000003", 1), ("000004", 0)]
    jl = tmp_path / "items.jsonl"
    jl.write_text('{"id": "x", "class_label": "b"}\n{"class_label": 2}\n{"class_label": "0"}\n')
    assert [(i.id, i.class_label) for i in read_items(jl, ["a", "b", "c"])] == [("x", 1), ("000002", 2), ("000003", 0)]
    assert read_items(jl, ["a", "b", "c"])[0] == Item("x", class_label=1)  # the name is not kept: a label is a label


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("names.txt", "a\nsquare\n", r"names.txt:2: unknown class 'square'; known classes: a, b, c$"),
        ("items.jsonl", '{"class_label": "A"}\n', r"items.jsonl:1: unknown class 'A'; known classes: a, b, c$"),
        ("items.jsonl", '{"class_label": 1.7}\n', r"class label 1.7 is not an integer"),
        ("names.txt", "3\n", r"class label 3 is not in \[0, 3\)"),
    ],
)
def test_an_unknown_class_name_is_one_line_naming_the_known_ones(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        read_items(path, ["a", "b", "c"])
    assert "\n" not in str(err.value)


def test_an_unknown_class_name_lists_a_long_list_of_names_in_part(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text("nope\n")
    with pytest.raises(ValueError, match=r"known classes: c0, c1, .*, c49 and 950 more$"):
        read_items(path, [f"c{i}" for i in range(1000)])


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("labels.txt", "", "has no items"),
        ("labels.txt", "0\nzero\n", r"labels.txt:2: class label 'zero' is not an integer"),
        ("labels.txt", "1.7\n", "class label '1.7' is not an integer"),
        ("labels.txt", "3\n", r"class label 3 is not in \[0, 3\)"),
        ("items.jsonl", '{"class_label": 1.7}\n', r"items.jsonl:1: class label 1.7 is not an integer"),
        ("items.jsonl", '{"class_label": true}\n', "class label True is not an integer"),
        ("items.jsonl", '{"class_label": 0}\n[1, 2]\n', r"items.jsonl:2: expected a JSON object .* got a list"),
        ("items.jsonl", '"0"\n', "got a str"),
        ("items.jsonl", '{"id": "a", "class_label": 0}\n{"id": "a", "class_label": 1}\n', "item id 'a' repeats line 1"),
        ("items.jsonl", '{"label": 0}\n', "no 'class_label'"),
    ],
)
def test_bad_prompt_files_are_one_line_errors_naming_the_line(tmp_path, name, content, message):
    """`{"class_label": 1.7}` and `true` used to become class 1; a line holding a list crashed."""
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        read_items(path, 3)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="cannot read prompts file"):
        read_items(tmp_path / "missing.txt", 3)


@pytest.mark.parametrize("item_id", ["../../victim/config", "/tmp/victim", "a/b", "a\\b", "", ".", "..", ".hidden", "*", "x" * 129])
def test_an_item_id_that_is_not_a_plain_file_name_is_refused(tmp_path, item_id):
    """Ids used to be joined to the output folder as given: "../../victim/config" overwrote
    a file two levels up, an absolute id wrote where it pointed, "a/b" crashed after its work."""
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"id": "fine", "class_label": 0}) + "\n" + json.dumps({"id": item_id, "class_label": 0}) + "\n")
    with pytest.raises(ValueError, match=r"items.jsonl:2: item id .* is not a plain file name"):
        read_items(path, 3)
    with pytest.raises(ValueError, match="is not a plain file name"):
        Item(item_id, class_label=0)


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


def test_the_default_decoding_repeats_a_run_byte_for_byte_and_a_resumed_run_equals_it(pipe, tmp_path, monkeypatch):
    """auto on the cost curve it measures (its choices follow this machine's seconds): two
    runs, and a run killed after its first image then resumed, write the same bytes, which
    are AR's images."""
    monkeypatch.setenv("MMSPEC_CACHE_DIR", str(tmp_path / "cache"))
    items = [Item(f"{i}", class_label=i % 3) for i in range(3)]
    for name in ("first", "second"):
        run_batch(pipe, items, tmp_path / name, seed=4)
    with pytest.raises(KeyboardInterrupt):
        run_batch(pipe, items, tmp_path / "resumed", seed=4,
                  on_item=lambda item, skipped: (_ for _ in ()).throw(KeyboardInterrupt) if item.id == "1" else None)
    run_batch(pipe, items, tmp_path / "resumed", seed=4)
    run_batch(pipe, items, tmp_path / "ar", seed=4, decoding="ar")
    for item in items:
        first = (tmp_path / f"first/images/{item.id}.png").read_bytes()
        for name in ("second", "resumed", "ar"):
            assert (tmp_path / f"{name}/images/{item.id}.png").read_bytes() == first, (name, item.id)


def test_unwritable_output_is_a_clear_error(pipe, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="is not writable"):
        run_batch(pipe, [Item("0", class_label=0)], blocker / "out")


def test_a_rerun_with_other_settings_is_refused_until_restarted(pipe, tmp_path):
    """A rerun with `ar --seed 7` used to add its records to those of `mc-sjd` in one manifest."""
    items = [Item(f"{i}", class_label=i % 3) for i in range(3)]
    run_batch(pipe, items[:2], tmp_path, decoding="mc-sjd", seed=0)
    settings = json.loads((tmp_path / "run.json").read_text())["settings"]
    assert settings["decoding"]["name"] == "mc-sjd" and settings["seed"] == 0 and settings["sampling"]["guidance_scale"] == 2.0
    for kwargs, changed in [(dict(decoding="ar"), "decoding"), (dict(seed=7), "seed"),
                            (dict(call_kwargs={"temperature": 0.5}), "sampling"), (dict(pipeline="elsewhere"), "pipeline"),
                            (dict(decoding=DecodingConfig.from_name("mc-sjd", window=4)), "decoding")]:
        with pytest.raises(ValueError, match=f"holds a run with other {changed} settings; choose a new output folder"):
            run_batch(pipe, items, tmp_path, **{"decoding": "mc-sjd", "seed": 0, **kwargs})
    assert len(os.listdir(tmp_path / "records")) == 2  # nothing was generated by the refused runs
    # the same settings resume (guidance 2.0 is the pipeline's default, given or not)
    assert [i.id for i in run_batch(pipe, items, tmp_path, decoding="mc-sjd", call_kwargs={"guidance_scale": 2.0})] == ["2"]
    clear_results(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["images", "records"] and not os.listdir(tmp_path / "images")
    assert len(run_batch(pipe, items, tmp_path, decoding="ar", seed=7)) == 3
    assert {json.loads(line)["decoding"] for line in write_manifest(tmp_path, items).read_text().splitlines()} == {"ar"}


def test_an_item_id_recorded_for_another_condition_is_refused(pipe, tmp_path):
    """Line numbers are ids: a rerun with another labels file used to skip its items as
    done and keep the earlier images under them."""
    run_batch(pipe, [Item("000001", class_label=0)], tmp_path)
    with pytest.raises(ValueError, match="item 000001 of .* was generated for class 0, not for class 2; choose a new output folder"):
        run_batch(pipe, [Item("000002", class_label=1), Item("000001", class_label=2)], tmp_path)
    assert os.listdir(tmp_path / "records") == ["000001.json"]


def test_a_folder_with_results_but_no_recorded_settings_is_refused(pipe, tmp_path):
    run_batch(pipe, [Item("0", class_label=0)], tmp_path)
    (tmp_path / "run.json").unlink()  # as a folder written before runs were recorded
    with pytest.raises(ValueError, match="holds results without a record of their settings and inputs"):
        run_batch(pipe, [Item("1", class_label=0)], tmp_path)


def test_batch_honours_the_decoding_window(pipe, tmp_path):
    """`mmspec batch` used to pass the method's name alone, so `--window` was ignored."""
    item = [Item("0", class_label=1)]
    forwards = {}
    for window in (1, 16):
        run_batch(pipe, item, tmp_path / str(window), decoding=DecodingConfig.from_name("keyed", window=window))
        forwards[window] = json.loads((tmp_path / str(window) / "records" / "0.json").read_text())["stats"]["forward_passes"]
    assert forwards[1] > forwards[16]


def test_atomic_write_to_a_folder_fails_without_leaving_a_temporary_file(tmp_path):
    """Writing the grid onto a folder used to leave `.grid.png.<pid>.tmp` behind."""
    (tmp_path / "grid.png").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic_write(tmp_path / "grid.png", lambda p: p.write_text("x"))
    assert os.listdir(tmp_path) == ["grid.png"]
