"""The one reconcile of views and jobs, driven by both front ends.

The operator (`controllers/`, kopf, the API server as its store) and `distributary run`
(`local/`, the state folder as its store) carry out a view's and a job's lifecycle through the same
code: observe -> plan (pure, `plan/`) -> record ahead -> act -> observe -> record. What differs
between them is behind small ports (`ports.py`): where status is kept, where events go, how a
view's namespace is seen and how its output Log is pointed at the serving topic; plus the two
backend contracts (`backends.base`). So a behaviour (the retention guard, rewinds, write-ahead
records, cutover, retirement) exists once, and is tested once.
"""
