"""``fsmatrix bisect``: find the first commit that made a cell slower (docs/bisect.md).

bisection.py  the binary search and its decisions: pure, no I/O (the race's tests and levels, results/verdict/race.py)
driver.py   the loop over a Lab: the ends, the steps, the confirmation, the finding and its summary
git.py      the range: revisions checked, commits listed, temporary clones (never the user's checkout)
lab.py      the real Lab: a clone per commit, --prepare or --settings-file, the cell run by runs.py
"""
