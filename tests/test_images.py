from PIL import Image, ImageFont

from mmspec.io.images import image_grid, label_rows, wrap_to_width


def test_a_long_label_is_wrapped_to_the_width_and_cut_with_an_ellipsis():
    font = ImageFont.load_default(size=16)
    words = "a red apple on a wooden table in the evening light " * 4
    lines = wrap_to_width(words, font, width=120, max_lines=3)
    assert len(lines) == 3 and lines[-1].endswith("...") and all(font.getlength(line) <= 120 for line in lines)
    assert wrap_to_width("circle", font, width=120, max_lines=3) == ["circle"]
    assert wrap_to_width("x" * 200, font, width=50, max_lines=2)[0].endswith("...")  # one word too long is cut


def test_label_rows_adds_a_label_column_and_keeps_the_grid():
    grid = image_grid([Image.new("RGB", (16, 16), "red")] * 4, cols=2)
    labelled = label_rows(grid, ["circle", "a much longer prompt"])
    width = labelled.width - grid.width
    assert labelled.height == grid.height and width > 20
    assert labelled.crop((width, 0, labelled.width, labelled.height)).tobytes() == grid.tobytes()
    column = labelled.crop((0, 0, width, labelled.height)).convert("L")
    top, bottom = column.crop((0, 0, width, grid.height // 2)), column.crop((0, grid.height // 2, width, grid.height))
    assert top.getextrema()[0] < 100 and bottom.getextrema()[0] < 100  # dark text in each row's label
