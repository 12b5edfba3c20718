"""Resumable runs: the output-path rule every verb's file names obey (`paths`) and the one
contract of a resumable batch run (`runner`): recorded inputs and settings, refusal of a
rerun that would mix results, atomic writes, torn records redone."""
