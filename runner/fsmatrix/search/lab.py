"""The real lab of a search (``search.stages.SearchLab``): each stage an ordinary run of the matrix's cells
on a backend, under the search's results directory, stored and resumable."""
