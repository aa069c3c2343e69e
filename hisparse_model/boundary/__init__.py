"""The input boundary: every file, stream, URL and number the package reads enters here.

Each reader is bounded (:mod:`.limits` declares every bound once, with why it is where it
is); each refusal is one :class:`InputError` line naming the flag or file and, for a file,
the line.  A surface added later reads through it and is bounded the day it is written.

Imports: nothing of the package (it is the bottom layer).  A new kind of input (a file
format, a URL) reads its bytes here and parses them in :mod:`hisparse_model.inputs`.
"""
