"""The line under AR's result and the accelerated ones: computed from the tokens."""

import torch

from mmspec.apps.token_match import same_tokens_line


def test_the_line_names_the_identical_and_counts_what_differs():
    ar = torch.tensor([[1, 2, 3, 4]])
    line = same_tokens_line(ar, [("auto", ar.clone()), ("mc-sjd", torch.tensor([[1, 9, 3, 8]])),
                                 ("keyed, window 8", ar.clone())])
    assert line == ("**Token-identical to AR:** `auto`, `keyed, window 8`. "
                    "**Other tokens than AR:** `mc-sjd` (2 of 4 tokens differ).")


def test_a_result_of_another_length_differs_and_a_lone_one_gets_one_part():
    """A mesh decode may stop at another length than AR's: not identical, and no error."""
    line = same_tokens_line(torch.arange(5), [("sjd", torch.arange(7))])
    assert line == "**Other tokens than AR:** `sjd` (7 tokens against AR's 5 differ)."
    assert same_tokens_line(torch.arange(5), [("auto", torch.arange(5))]) == "**Token-identical to AR:** `auto`."
