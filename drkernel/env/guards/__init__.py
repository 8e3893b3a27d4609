"""Guards: what keeps a candidate honest, and the names of what it did wrong.

The one table of integrity findings, their ids and the sentence the model reads (:mod:`.hacks`);
the static checks on the candidate's source (:mod:`.static_checks`, in the grader); in the
candidate's process, the audit hook and state guards (:mod:`.audit`), the seal over the harness's
own namespaces (:mod:`.seal`) and NumPy's array interfaces turned off (:mod:`.array_interfaces`).
Standard library, torch and NumPy only: every other room may import these.
"""
