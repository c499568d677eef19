"""``fsmatrix search FILE`` (docs/search.md): the best configuration of a space too large to cross, in
stages of ordinary cells, with what was not tried bounded.

stages.py   the stages over a ``Lab`` (screen, refine, race, confirm) and their decisions: pure, no I/O
lab.py      the real lab: each stage an ordinary run of the matrix's cells (stored, resumable)
space_of.py a matrix file's space: its settings, configurations and the cell of each
"""
