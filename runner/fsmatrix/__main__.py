from fsmatrix.cli import main

main()
