from fsmatrix.bench.micro import main
from fsmatrix.errors import exit_with

exit_with(main, "fsmatrix.bench")
