"""Sense induction: a word's senses found in a corpus without labels, from the biLM's substitutes
and the words around each occurrence, clustered (with the number-of-senses rule) and named; the
corpus reading and target forms it needs, and the induced senses' files."""

#: the representation ``induce``, ``change`` and ``explore`` cluster by default: ``substitutes+context``
#: (the LM's substitutes beside the words around each occurrence, embedded with the model's own word
#: vectors), chosen for each shipped default on the hand-labelled sense sets, SemEval-2010's tuning
#: words the second opinion (docs/senses.md#which-representation-by-default)
DEFAULT_REPRESENTATION = "substitutes+context"

#: the number-of-senses rule's threshold: a split is kept when its z-score against a Gaussian null of
#: the same spread, on the group's two leading principal axes, is below ``-SIGNIFICANCE``; chosen
#: again for each shipped default on the tuning data (docs/senses.md#the-rule-on-two-axes-issue-47)
SIGNIFICANCE = 0.6
