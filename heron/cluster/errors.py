"""The one error the cluster layer raises for dead, hung or unplaceable actors."""


from heron.errors import ComponentError


class ClusterError(ComponentError):
    """An actor died, missed its deadline, or could not be placed. The message names the actor,
    the call and the deadline (``cluster.*_timeout_s``)."""
