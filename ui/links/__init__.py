"""Links to a view: a view encoded in the page's address, and the page drawn from one."""
