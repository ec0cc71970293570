"""The ground every other package stands on: user errors (one line, exit 2), files written whole,
randomness as a function of (seed, epoch, sample), CPU threads, stop signals, elastic restarts, whether a host
answers, and the scripts' command-line parser.

May import: nothing of ours (only the standard library, torch, numpy and accelerate).
"""
