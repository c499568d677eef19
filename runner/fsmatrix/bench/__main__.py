from fsmatrix.bench.micro import main

raise SystemExit(main())
