"""decoding="auto": before each forward, the keyed setting with the most tokens per second
(see `chooser` for the rule and why the tokens do not depend on it).

    cost_curve.py  the seconds of one forward by inputs per row on this device, measured and cached
    glue.py        the loop's own seconds per iteration, measured on each call
    acceptance.py  the tokens a window commits per forward, and the drafters' hit rates
    chooser.py     Choice and CostChooser: the argmax over windows, branch settings and drafters
    choice_log.py  what was chosen over a call (DecodeStats.choices), in one line
"""

from mmspec.decoding.auto.acceptance import AcceptanceModel, DrafterHits, RunAcceptance
from mmspec.decoding.auto.choice_log import ChoiceLog, describe_choices, merge_choices
from mmspec.decoding.auto.chooser import COPY_AXES, WINDOWS, AutoContext, Choice, CostChooser, drafter_options, make_chooser
from mmspec.decoding.auto.cost_curve import CostCurve, session_curve
from mmspec.decoding.auto.glue import GlueTimer

__all__ = ["COPY_AXES", "WINDOWS", "AcceptanceModel", "AutoContext", "Choice", "ChoiceLog", "CostChooser",
           "CostCurve", "DrafterHits", "GlueTimer", "RunAcceptance", "describe_choices", "drafter_options",
           "make_chooser", "merge_choices", "session_curve"]
