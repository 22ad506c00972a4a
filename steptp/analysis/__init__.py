"""What a program costs and what its schedule's tiles look like, read off the LEIR alone: the
analytic cost model (:mod:`.cost_model`) and the tile shapes (:mod:`.tiles`). The search ranks
candidates with them and the reasoning cites them, so both import them from here."""
