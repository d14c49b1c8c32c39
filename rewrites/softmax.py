"""(in progress)"""

RULES = ()
