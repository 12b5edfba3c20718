import pytest

from mmspec.runs.paths import class_file_name, file_name, inside

from mmspec.io.files import atomic_write


@pytest.mark.parametrize("name", ["../x", "/abs", "a/b", "a\\b", "", ".", "..", ".hidden", "*", "x" * 129, 7, None])
def test_a_name_that_is_not_a_plain_file_name_is_refused(name):
    with pytest.raises(ValueError, match="is not a plain file name"):
        file_name(name, "item id")


def test_class_names_become_file_names_or_are_refused():
    assert class_file_name("circle right") == "circle_right"
    for bad in ("../../pwn_torus", "a/b", ".x", "", "caf\u00e9"):
        with pytest.raises(ValueError, match="of the pipeline cannot name files"):
            class_file_name(bad)


def test_inside_follows_symlinks(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert inside(out, "images/a.png") == out / "images" / "a.png"
    (out / "link").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="outside the output folder"):
        inside(out, "link/a.png")
    with pytest.raises(ValueError, match="outside the output folder"):
        inside(out, ".")


def test_atomic_write_leaves_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(path, fail)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
