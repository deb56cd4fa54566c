"""Stands in for gpulint.engines.litert_child in test_engine_litert: it logs a fatal line as the
accelerator's C++ code does and dies of SIGSEGV before answering."""

import os
import signal
import sys

sys.stderr.write("F0000 00:00:0.0  1 model.cc:1] boom\n")
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGSEGV)
