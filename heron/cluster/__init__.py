"""Where components run: in this process (``LocalExecutor``) or as Ray actors in a placement
group (``RayExecutor``). The component classes and their builders are the same in both."""
