"""Gradio plumbing the tabs share: the queue's order, sessions and models, errors, limits, page scripts, exports."""
