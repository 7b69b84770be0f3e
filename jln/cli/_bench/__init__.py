"""``jln bench``'s machinery: the harness (data, timing, byte counts, residual sizes, reports,
:mod:`.harness`) and the implementations it compares (:mod:`.impls`).

It lives under the console command, not beside the norms: ``import jln`` never loads it.
"""
