"""PyInstaller's entry script: the bundle's `tandem` executable runs app.main:main, as the
`tandem` console script does in a virtual environment (app.main calls freeze_support first)."""

import sys

from app.main import main

if __name__ == "__main__":
    sys.exit(main())
