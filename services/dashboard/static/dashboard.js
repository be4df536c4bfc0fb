// Copy buttons: <button data-copy="input-id" hidden>. Rendered hidden, shown here: without
// JavaScript there is no button that does nothing, only the key's field to select by hand.
// The key stays in the page only; nothing is stored.
for (const button of document.querySelectorAll('button[data-copy]')) button.hidden = false;
document.addEventListener('click', async (event) => {
  const button = event.target instanceof Element ? event.target.closest('button[data-copy]') : null;
  if (!button) return;
  const input = document.getElementById(button.getAttribute('data-copy'));
  const status = button.parentElement && button.parentElement.querySelector('.copy-status');
  if (!input) return;
  let ok = false;
  try {
    await navigator.clipboard.writeText(input.value);
    ok = true;
  } catch {
    input.select();
    ok = document.execCommand && document.execCommand('copy');
  }
  if (status) status.textContent = ok ? 'Copied.' : 'Select the key and copy it by hand.';
});
