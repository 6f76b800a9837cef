import sys

from sat_ext.demo.cli import main

if __name__ == "__main__":
    sys.exit(main())
