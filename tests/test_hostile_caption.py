"""`mmspec caption --out` against hostile and careless input: other images under the same
file names, torn records, and an output folder whose subfolder leads elsewhere."""

import json

import pytest

from mmspec.commands.cli import main
from mmspec.datasets.shape_captions import load_scenes
from mmspec.io.images import to_pil
from tests.helpers.tiny_captioner import tiny_captioner

FLAGS = ["--max-new-tokens", "4", "--decoding", "ar"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny captioner, and two folders holding different images under the same names."""
    root = tmp_path_factory.mktemp("caption")
    tiny_captioner().save_pretrained(root / "pipe")
    scenes = to_pil(load_scenes("heldout", 4)[0])
    for folder, images in (("dirA", scenes[:2]), ("dirB", scenes[2:])):
        (root / folder).mkdir()
        for i, image in enumerate(images):
            image.save(root / folder / f"shot{i}.png")
    return root


def caption(saved, folder, out, *flags):
    return main(["caption", str(saved / folder), "--pipeline", str(saved / "pipe"), "--out", str(out), *FLAGS, *flags])


def one_error(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("mmspec caption: error:"), errors
    return errors[0]


def test_other_images_under_the_same_names_are_refused_until_restarted(saved, tmp_path, capsys):
    """`caption dirB --out cap` after `caption dirA --out cap` kept dirA's captions for
    dirB's images, which have the same file names."""
    out = tmp_path / "cap"
    assert caption(saved, "dirA", out) == 0
    capsys.readouterr()
    assert caption(saved, "dirB", out) == 2
    error = one_error(capsys)
    assert "item shot0 of" in error and "was generated for image sha256" in error and "--restart" in error
    assert caption(saved, "dirB", out, "--restart") == 0
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [m["image"] for m in manifest] == [str(saved / "dirB" / "shot0.png"), str(saved / "dirB" / "shot1.png")]


def test_the_same_images_moved_elsewhere_resume(saved, tmp_path, capsys):
    """An image is its content: a copy of dirA in another folder is the same run."""
    out = tmp_path / "cap"
    assert caption(saved, "dirA", out) == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    for image in (saved / "dirA").iterdir():
        (copy / image.name).write_bytes(image.read_bytes())
    assert main(["caption", str(copy), "--pipeline", str(saved / "pipe"), "--out", str(out), *FLAGS]) == 0


def test_a_torn_record_is_redone(saved, tmp_path):
    """A torn record used to count as done, and the manifest took its half line."""
    out = tmp_path / "cap"
    assert caption(saved, "dirA", out) == 0
    record = out / "records" / "shot1.json"
    whole = record.read_text()
    record.write_text(whole[:10])
    assert caption(saved, "dirA", out) == 0
    assert json.loads(record.read_text())["caption"] == json.loads(whole)["caption"]
    assert [json.loads(line)["id"] for line in (out / "manifest.jsonl").read_text().splitlines()] == ["shot0", "shot1"]


def test_a_records_folder_that_leads_outside_is_refused(saved, tmp_path, capsys):
    """A `records` symlink in the output folder used to take the records wherever it pointed."""
    out = tmp_path / "cap"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (out / "records").symlink_to(tmp_path / "elsewhere")
    assert caption(saved, "dirA", out) == 2
    assert "outside the output folder" in one_error(capsys)
    assert not list((tmp_path / "elsewhere").iterdir())


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("side", [30_000, 5_000])
def test_an_image_past_the_pixel_cap_is_one_line_naming_file_and_cap(saved, tmp_path, capsys, side):
    """A 30,000 x 30,000 PNG (109 kB on disk) raised PIL's DecompressionBombError; one of
    5,000 x 5,000 was decoded whole. Both are refused from the header, naming the file."""
    from PIL import Image

    path = tmp_path / f"bomb{side}.png"
    Image.new("1", (side, side)).save(path)
    assert main(["caption", str(path), "--pipeline", str(saved / "pipe"), *FLAGS]) == 2
    error = one_error(capsys)
    assert repr(str(path)) in error and "16,777,216" in error and "pixels" in error


def test_a_rerun_says_how_many_it_captioned_and_how_many_were_done(saved, tmp_path, capsys):
    """A rerun with nothing left to do said "captioned 2 images"."""
    out = tmp_path / "cap"
    assert caption(saved, "dirA", out) == 0
    assert "captioned 2 images (0 already done)" in capsys.readouterr().out
    assert caption(saved, "dirA", out) == 0
    assert "captioned 0 images (2 already done)" in capsys.readouterr().out
