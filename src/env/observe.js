// Run in the page after every reset and step (one WebDriver round trip).
// arguments[0] = [originX, originY, width, height] of the screenshot in viewport px.
// Returns {ready, url, scroll, elements, status}; `status` comes from the task's
// expression spliced in below as __STATUS__.
var o = arguments[0];
// A navigation started by the last action fires beforeunload before the next page
// commits; the caller then re-reads over WebDriver, which waits for the navigation.
// A followed link's navigation can start in a task after the click (after input over
// DevTools has returned): the last click is kept, and the read reports once whether it
// followed a link, so that the caller waits for the navigation to start.
if (!window.__guirlWatch) {
  window.__guirlWatch = true;
  addEventListener('beforeunload', function () { window.__guirlLeaving = true; });
  addEventListener('click', function (e) { window.__guirlClick = e; }, true);
}
function follows(e) {
  // Whether the default action of click `e` (its handlers have all run) leaves this
  // document: a link not prevented, not a download, not another window, not a fragment.
  var a = e && e.target && e.target.closest ? e.target.closest('a[href]') : null;
  if (!a || e.defaultPrevented || e.ctrlKey || e.shiftKey || e.metaKey || e.altKey) return false;
  if (a.hasAttribute('download')) return false;
  var t = (a.getAttribute('target') || '').toLowerCase();
  if (t && t !== '_self' && t !== '_top' && t !== '_parent') return false;
  var u;
  try { u = new URL(a.getAttribute('href'), document.baseURI); } catch (err) { return false; }
  // mailto:, tel:, javascript: and the like open no document here.
  if (['http:', 'https:', 'file:'].indexOf(u.protocol) < 0) return false;
  var here = new URL(location.href);
  return !(u.hash && u.href.split('#')[0] === here.href.split('#')[0]);
}
var following = follows(window.__guirlClick);
window.__guirlClick = null;
var ready = document.readyState === 'complete';
var status = null;
try { status = (__STATUS__); } catch (e) { status = { error: String(e) }; }
var SEL = 'a,button,input,textarea,select,option,label,summary,[role],[onclick],[tabindex],[contenteditable=""],[contenteditable=true]';
var out = [];
var seen = new Set();
function visible(el, r) {
  if (r.width <= 0 || r.height <= 0) return false;
  var cs = getComputedStyle(el);
  return cs.visibility !== 'hidden' && cs.display !== 'none' && parseFloat(cs.opacity || '1') > 0;
}
var cands = [];
function consider(el) {
  if (!seen.has(el)) { seen.add(el); cands.push(el); }
}
function add(el) {
  // MiniWoB++'s own overlays and score display are not part of the task.
  if (el.closest('#sync-task-cover, #reward-display, #click-canvas')) return;
  var r = el.getBoundingClientRect();
  if (!visible(el, r)) return;
  var tag = el.tagName.toLowerCase();
  var text = (tag === 'input' || tag === 'textarea') ? '' : (el.innerText || el.textContent || '');
  text = text.replace(/\s+/g, ' ').trim();
  if (text.length > 200) text = text.slice(0, 200);
  // A form control's accessible name: aria-label, else its first <label>'s text.
  var label = '';
  if (tag === 'input' || tag === 'textarea' || tag === 'select') {
    label = el.getAttribute('aria-label') || (el.labels && el.labels.length ? el.labels[0].innerText || '' : '');
    label = label.replace(/\s+/g, ' ').trim().slice(0, 200);
  }
  var value = '';
  if ('value' in el && typeof el.value === 'string' && tag !== 'button' && tag !== 'li') value = el.value;
  out.push({
    tag: tag, id: el.id || '', classes: (typeof el.className === 'string') ? el.className : '',
    text: text, label: label, value: value, input_type: tag === 'input' ? (el.type || 'text') : '',
    checked: !!(el.checked || el.selected), focused: document.activeElement === el, name: el.getAttribute('name') || '',
    bbox: { x: r.left - o[0], y: r.top - o[1], w: r.width, h: r.height }
  });
}
if (document.body) {
  document.querySelectorAll(SEL).forEach(consider);
  // Elements made clickable by script (d3/jQuery handlers) usually say so with the cursor.
  var all = document.body.getElementsByTagName('*');
  for (var i = 0; i < all.length && i < 5000; i++) {
    var el = all[i];
    if (seen.has(el)) continue;
    var cs = getComputedStyle(el);
    if (cs.cursor === 'pointer' && (!el.parentElement || getComputedStyle(el.parentElement).cursor !== 'pointer')) consider(el);
  }
  cands.sort(function (a, b) { return (a.compareDocumentPosition(b) & 4) ? -1 : 1; });
  cands.forEach(add);
}
return {
  ready: ready, url: location.href, leaving: !!window.__guirlLeaving, following: following,
  // jQuery animations (MiniWoB++ accordions, dialogs) run on timers for a few hundred ms.
  animating: !!(window.jQuery && jQuery.timers && jQuery.timers.length > 0),
  scroll: [Math.round(window.scrollX), Math.round(window.scrollY)],
  elements: out, status: status
};
