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
#
# A number typed outside the slider's range (9 in a 1..4 box) is moved into it before gradio
# reads it: gradio sent it as typed, refused it ("9 is above the largest value this control
# takes") and left a red "Error" pill over the figures after the toast. The box's tooltip says
# what was typed and the range.
SLIDER_ENTER_JS = """
(() => {
  const sliderBox = (box) => {
    if (!(box instanceof HTMLInputElement) || box.type !== 'number') return null;
    if (box.dataset.testid !== 'number-input') return null;
    const slider = box.closest('.wrap');
    const range = slider && slider.querySelector('input[type="range"]');
    return range ? range : null;
  };
  const clamp = (box) => {
    const range = sliderBox(box);
    if (!range || box.value === '') return;
    const value = Number(box.value);
    const low = Number(range.min), high = Number(range.max);
    if (!Number.isFinite(value) || (value >= low && value <= high)) return;
    const kept = Math.min(Math.max(value, low), high);
    box.value = String(kept);
    box.dispatchEvent(new Event('input', {bubbles: true}));
    box.title = `${value} is out of range: this slider takes ${low} to ${high}`;
  };
  document.addEventListener('keydown', (event) => {
    const box = event.target;
    if (event.key !== 'Enter' || event.isComposing || !sliderBox(box)) return;
    event.preventDefault();
    clamp(box);
    box.blur();
  }, true);
  // Leaving the box (a click elsewhere) is gradio's other path to .release: clamp first.
  document.addEventListener('focusout', (event) => clamp(event.target), true);
})();
"""
