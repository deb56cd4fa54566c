"""The child process: `python -m gpulint.reference SRC [FLAGS] MODEL DST ...`, or `--time`."""

import sys

from gpulint.reference.child import child_main
from gpulint.reference.timing import TIME, time_child

if __name__ == "__main__":
    if sys.argv[1] == TIME:
        time_child(int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7])
    else:
        child_main(sys.argv[1], sys.argv[2:])
