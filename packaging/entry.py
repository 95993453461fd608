"""PyInstaller's script entry point for the single binary: runs ``mlstream.app.cli:main``.

Not used by ``pip install`` (that installs the ``mlstream`` console script from
setup.cfg); see ``packaging/build_binary.sh``.
"""

import sys

from mlstream.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
