"""The shared contracts of a release's text: the chat format a model is trained and prompted on
(:mod:`.chat`, token counts in :mod:`.tokens`) and the chain-of-thought schema (:mod:`.cot_schema`).

It sits low in the package layers so that the CoT writers, curation, export and eval all read
one definition (see ``docs/architecture.md``).
"""
