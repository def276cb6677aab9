"""A slider's number box answers Enter.

Gradio's slider fires ``.release`` when its handle is let go or its number box loses the focus,
but not when Enter is pressed in the box (typing fires ``.input`` and ``.change`` per keystroke,
and a drag fires them per tick), so a student who typed a layer and pressed Enter saw nothing
redraw. The app's live views listen to ``.release``: the page script below makes
Enter in a slider's number box leave the box, which is gradio's own path to ``.release`` (it
also clamps the value to the slider's range). One redraw per Enter, none per keystroke, and
every slider of every tab, present and future, without wiring a second event per slider.
"""

from __future__ import annotations

# Part of the page's script (ui/demo.py's PAGE_JS). A gradio slider is a ``.wrap`` holding a
# number box (data-testid="number-input") and a range input; a gr.Number has no range input,
# and keeps its own ``.submit``.
SLIDER_ENTER_JS = """
document.addEventListener('keydown', (event) => {
  const box = event.target;
  if (event.key !== 'Enter' || event.isComposing || !(box instanceof HTMLInputElement)) return;
  if (box.type !== 'number' || box.dataset.testid !== 'number-input') return;
  const slider = box.closest('.wrap');
  if (!slider || !slider.querySelector('input[type="range"]')) return;
  event.preventDefault();
  box.blur();
}, true);
"""
