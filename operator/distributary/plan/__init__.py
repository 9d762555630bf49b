"""Pure planners: from specs and observations to desired state, actions and conditions.

Nothing in this package performs I/O or imports an adapter; the controllers and the local loop
observe, call these functions, and act on what they return.
"""
