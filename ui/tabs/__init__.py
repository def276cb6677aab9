"""One module per tab: its layout (``build``) and its handlers, module-level functions that take
the shared ``ModelRegistry`` (and a session's state) as arguments, so tests call them directly."""
