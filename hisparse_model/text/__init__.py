"""The answers as text and chart data: what the command line prints and the charts draw.

:mod:`.report`, :mod:`.exposure_report`, :mod:`.traffic_report` word the answers;
:mod:`.chart_data` (with :mod:`.chart_keys`, :mod:`.chart_traffic`) turns them into the
lists the views draw.  Nothing here computes an answer of its own.

Imports: the layers below (model, schedule, inputs, answers).  A new output format goes here.
"""
