"""`python -m commscope`: the same command as the `commscope` console script (shell)."""

from commscope.service.main import main

raise SystemExit(main())
