"""A textbox answers every change of its text, not only a key press.

Gradio 6's textbox fires ``.input`` from the ``keypress`` DOM event. Text pasted in (the
context menu, Ctrl+V, a drop), erased (Backspace, Delete, cut) or written by a phone's on-screen
keyboard or an input method changes the text without a ``keypress``: the live views stayed on
the text before, with no sign that they were out of date. (``.change`` fires for every change,
but also when the server sets a value, which a link or a tour stop does: the views listen to
``.input`` so that such a value is drawn once.)

The page script below gives such a change the ``keypress`` gradio listens for, once per change,
after gradio has read the new text; a change that a real key press already announced is left
alone.
"""

from __future__ import annotations

# Part of the page's script (ui/demo.py's PAGE_JS). A gradio textbox is a textarea or an input
# with data-testid="textbox"; the synthetic key is not Enter, so it never submits.
TEXT_EDIT_JS = """
(() => {
  const isTextbox = (el) => (el instanceof HTMLTextAreaElement || el instanceof HTMLInputElement)
    && el.dataset.testid === 'textbox';
  const announce = (box) => box.dispatchEvent(
    new KeyboardEvent('keypress', {key: 'Unidentified', bubbles: true}));
  document.addEventListener('keypress', (event) => {
    if (!event.isTrusted || !isTextbox(event.target)) return;
    const box = event.target;  // its text changes in this task, if at all
    box.__keyed = true;
    setTimeout(() => { box.__keyed = false; }, 0);
  }, true);
  // Bubbling, so that gradio's own listener on the box has taken the new text.
  document.addEventListener('input', (event) => {
    const box = event.target;
    if (!event.isTrusted || !isTextbox(box) || box.__keyed || event.isComposing) return;
    announce(box);
  });
  document.addEventListener('compositionend', (event) => {
    if (isTextbox(event.target)) announce(event.target);
  });
})();
"""
