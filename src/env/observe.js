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
// `elements`: what a person sees in the screenshot and can act on, with only the text that
// is drawn. An interactive candidate (SEL, a pointer cursor, a script's click handler) is
// listed if it is not transparent and a pointer reaches it somewhere in the screenshot;
// its text is the text of its text nodes that are drawn (see `drawn`).
var SEL = 'a,button,input,textarea,select,option,label,summary,[role],[onclick],[tabindex],[contenteditable=""],[contenteditable=true]';
var out = [];
var seen = new Set();
var de = document.documentElement;
// The screenshot's part of the viewport: a point outside it is no action the policy can take.
var VX0 = Math.max(0, o[0]), VY0 = Math.max(0, o[1]);
var VX1 = Math.min(window.innerWidth, o[0] + o[2]), VY1 = Math.min(window.innerHeight, o[1] + o[3]);
var styles = new Map(), opaque = new Map(), shown = new Map(), range = document.createRange();
function style(el) {
  var s = styles.get(el);
  if (!s) { s = getComputedStyle(el); styles.set(el, s); }
  return s;
}
// The opacity el draws with: its own and every ancestor's `opacity` and `filter:
// opacity()`, multiplied (a child cannot undo an ancestor's opacity: 0).
function opacityUp(el) {
  if (!el) return 1;
  var v = opaque.get(el);
  if (v === undefined) {
    var s = style(el), f = parseFloat(s.opacity);
    if (s.filter && s.filter !== 'none') {
      s.filter.replace(/opacity\(([\d.e+-]+)(%?)\)/g, function (m, n, pct) { f *= parseFloat(n) / (pct ? 100 : 1); return m; });
    }
    v = f > 0 ? f * opacityUp(el.parentElement) : 0;
    opaque.set(el, v);
  }
  return v;
}
function opaqueUp(el) { return opacityUp(el) > 0; }
// [r, g, b, a] of a computed colour; null for a form this does not read (color(), lab()).
function rgba(c) {
  if (!c || c === 'transparent') return [0, 0, 0, 0];
  var m = /^rgba?\(([^)]*)\)$/.exec(c);
  if (!m) return null;
  var p = m[1].split(/[\s,\/]+/).filter(Boolean).map(parseFloat);
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
}
// A colour's alpha (1 for a form this does not read).
function alpha(c) { var v = rgba(c); return v ? v[3] : 1; }
function mix(c, under) { return [0, 1, 2].map(function (i) { return c[i] * c[3] + under[i] * (1 - c[3]); }); }
function lum(c) {
  var l = c.map(function (v) { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2];
}
function contrast(a, b) { var x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
// The colour painted under the content of el by it and its ancestors (the page white at
// the bottom), or null where an image or a colour this does not read is part of it.
var backs = new Map();
function backdrop(el) {
  if (!el) return [255, 255, 255];
  var v = backs.get(el);
  if (v !== undefined) return v;
  var s = style(el), c = rgba(s.backgroundColor);
  if (s.backgroundImage !== 'none' || !c) v = null;
  else if (c[3] >= 1) v = c.slice(0, 3);
  else { var u = backdrop(el.parentElement); v = u && mix(c, u); }
  backs.set(el, v);
  return v;
}
// The colour painted under el at (x, y), whatever paints it (a box placed under it, not
// only its ancestors); null where an image or a replaced element is part of it.
var REPLACED = /^(IMG|CANVAS|VIDEO|SVG|svg|IFRAME|OBJECT|EMBED|PICTURE)$/;
function paintedUnder(el, x, y) {
  var stack = document.elementsFromPoint(x, y), i = stack.indexOf(el), layers = [];
  for (i = Math.max(i, 0); i < stack.length; i++) {
    var s = style(stack[i]), c = rgba(s.backgroundColor);
    if (REPLACED.test(stack[i].tagName) || s.backgroundImage !== 'none' || !c) return null;
    c[3] *= opacityUp(stack[i]);
    if (c[3] > 0) layers.push(c);
    if (c[3] >= 1) break;
  }
  var under = [255, 255, 255];
  for (var k = layers.length - 1; k >= 0; k--) under = mix(layers[k], under);
  return under;
}
// Whether el's own text (in style s) stands out from what is under it at (x, y): text
// the colour of its background, or nearly transparent, is not there for a person. A
// shadow or a stroke draws it anyway.
var FAINT = 1.05;
function legible(el, s, x, y) {
  if (s.textShadow !== 'none' || parseFloat(s.webkitTextStrokeWidth) > 0) return true;
  var c = rgba(s.webkitTextFillColor || s.color);
  if (!c) return true;
  c[3] *= opacityUp(el);
  var under = backdrop(el);
  if (under && contrast(mix(c, under), under) >= FAINT) return true;
  under = paintedUnder(el, x, y);
  return !under || contrast(mix(c, under), under) >= FAINT;
}
// The part of rect r inside the screenshot and the viewport, or null.
function inView(r) {
  var x0 = Math.max(r.left, VX0), y0 = Math.max(r.top, VY0);
  var x1 = Math.min(r.right, VX1), y1 = Math.min(r.bottom, VY1);
  return x1 > x0 && y1 > y0 ? [x0, y0, x1, y1] : null;
}
function within(h, el) { return !!h && (h === el || el.contains(h)); }
// Whether a pointer reaches el (or a child of it) at one of 9 points of one of its boxes in
// view. The hit test answers at once for covered, clipped away (overflow, clip, clip-path),
// visibility: hidden (a visible child still counts) and outside the screenshot. Several
// points, not the centre alone: a button half under a dialog, a link whose box centre
// falls between its two lines, or a control partly scrolled out of its box still shows and
// takes clicks. The centre comes first, and most elements answer there.
var AT = [0.5, 0.15, 0.85];
function reachable(el) {
  var rs = el.getClientRects();
  for (var i = 0; i < rs.length && i < 4; i++) {
    var c = inView(rs[i]);
    if (!c) continue;
    for (var a = 0; a < 3; a++) {
      for (var b = 0; b < 3; b++) {
        var h = document.elementFromPoint(c[0] + (c[2] - c[0]) * AT[b], c[1] + (c[3] - c[1]) * AT[a]);
        if (within(h, el)) return true;
      }
    }
  }
  return false;
}
// Whether text node t is drawn where a person sees it: its element is visible, opaque,
// with a font size and a colour, and a hit test on one of its line boxes in view (at its
// middle or near either end, at mid-height or a little above or below it: a word whose
// right half or lower half is under something still reads) lands on that element (not on
// something over it, nor, for text clipped away by overflow, clip or clip-path, on
// whatever lies under it).
var TEXT_AT = [0.5, 0.3, 0.7];
function drawn(t) {
  var v = shown.get(t);
  if (v !== undefined) return v;
  v = false;
  var p = t.parentElement, s = p && style(p);
  if (s && s.visibility === 'visible' && parseFloat(s.fontSize) > 0 &&
      alpha(s.webkitTextFillColor || s.color) > 0 && opaqueUp(p)) {
    range.selectNodeContents(t);
    var rs = range.getClientRects();
    for (var i = 0; i < rs.length && i < 8 && !v; i++) {
      var c = inView(rs[i]);
      for (var k = 0; c && k < 9 && !v; k++) {
        var x = c[0] + (c[2] - c[0]) * AT[k % 3], y = c[1] + (c[3] - c[1]) * TEXT_AT[(k / 3) | 0];
        var h = document.elementFromPoint(x, y);
        // The pointer passes through text with pointer-events: none, so no hit test can
        // tell what is over it: its geometry has to do.
        v = within(h, p) || (!!h && s.pointerEvents === 'none');
        if (v) v = legible(p, s, x, y);
        if (v === false && within(h, p)) { i = rs.length; break; }
      }
    }
  }
  shown.set(t, v);
  return v;
}
// A closed list shows its chosen option; a list box (multiple, size > 1) the options in its box.
function selectText(sel) {
  if (!sel.multiple && sel.size <= 1) {
    var chosen = sel.options[sel.selectedIndex];
    return chosen ? chosen.label : '';
  }
  var box = sel.getBoundingClientRect(), t = [];
  for (var i = 0; i < sel.options.length; i++) {
    var r = sel.options[i].getBoundingClientRect();
    if (r.height > 0 && r.top < box.bottom && r.bottom > box.top) t.push(sel.options[i].label);
  }
  return t.join(' ');
}
// What a line break separates in innerText: text in different blocks (an inline-level box
// does not break the line).
var INLINE = /^(inline|contents|ruby)/;
function blockOf(n, root) {
  for (var p = n.parentElement; p && p !== root; p = p.parentElement) {
    if (!INLINE.test(style(p).display)) return p;
  }
  return root;
}
function transform(s, tt) {
  if (tt === 'uppercase') return s.toUpperCase();
  if (tt === 'lowercase') return s.toLowerCase();
  if (tt === 'capitalize') return s.replace(/(^|\s)(\S)/g, function (m, a, b) { return a + b.toUpperCase(); });
  return s;
}
// The drawn text under node, as innerText joins it (blocks and <br> apart, text-transform
// applied) but without what is not drawn; about 400 characters at most.
var SKIP = /^(SCRIPT|STYLE|NOSCRIPT|TEMPLATE|TEXTAREA|INPUT|OPTION|IFRAME|OBJECT)$/;
function textOf(root) {
  var acc = { parts: [], len: 0, block: null };
  (function walk(node) {
    for (var c = node.firstChild; c && acc.len < 400; c = c.nextSibling) {
      if (c.nodeType === 3) {
        if (!/\S/.test(c.data)) { acc.parts.push(' '); continue; }
        if (!drawn(c)) continue;
        var b = blockOf(c, root);
        if (acc.block && b !== acc.block) acc.parts.push(' ');
        acc.block = b;
        var tx = transform(c.data, style(c.parentElement).textTransform);
        acc.parts.push(tx);
        acc.len += tx.length;
      } else if (c.nodeType === 1) {
        if (c.tagName === 'BR') acc.parts.push(' ');
        else if (c.tagName === 'SELECT') {
          if (style(c).visibility === 'visible' && opaqueUp(c) && c.getClientRects().length) {
            acc.parts.push(' ', selectText(c), ' ');
          }
        } else if (!SKIP.test(c.tagName)) walk(c);
      }
    }
  })(root);
  return acc.parts.join('');
}
function clean(s) {
  s = s.replace(/\s+/g, ' ').trim();
  return s.length > 200 ? s.slice(0, 200) : s;
}
var cands = [];
function consider(el) {
  if (el.nodeType === 1 && !seen.has(el)) { seen.add(el); cands.push(el); }
}
// Elements made clickable by script: a handler property (el.onclick = f, d3 v3's
// __onclick), d3 v4+'s __on list, or jQuery's handlers (a delegated one marks the elements
// its selector matches). Listeners added with addEventListener leave no trace.
var CLICKS = ['click', 'mousedown', 'mouseup'];
function scripted(el) {
  for (var i = 0; i < CLICKS.length; i++) {
    if (el['on' + CLICKS[i]] || el['__on' + CLICKS[i]]) return true;
  }
  var on = el.__on;
  if (Array.isArray(on)) {
    for (var j = 0; j < on.length; j++) if (on[j] && CLICKS.indexOf(on[j].type) >= 0) return true;
  }
  return false;
}
var jqData = window.jQuery && jQuery._data;
function jqClicks(node) {
  var ev = jqData ? jqData(node, 'events') : null;
  if (!ev) return;
  CLICKS.forEach(function (t) {
    (ev[t] || []).forEach(function (h) {
      if (h.selector) {
        try { node.querySelectorAll(h.selector).forEach(consider); } catch (e) { /* jQuery-only selector */ }
      } else if (node !== document && node !== document.body && node !== de) {
        consider(node);
      }
    });
  });
}
function add(el) {
  // MiniWoB++'s own overlays and score display are not part of the task.
  if (el.closest('#sync-task-cover, #reward-display, #click-canvas')) return;
  if (!opaqueUp(el) || !reachable(el)) return;
  var r = el.getBoundingClientRect();
  var tag = el.tagName.toLowerCase();
  // (A listed <option> is one of an open list box's, which draws its label.)
  var text = (tag === 'input' || tag === 'textarea') ? '' :
    clean(tag === 'select' ? selectText(el) : tag === 'option' ? el.label : textOf(el));
  // A form control's accessible name: aria-label, else its first <label>'s drawn text.
  var label = '';
  if (tag === 'input' || tag === 'textarea' || tag === 'select') {
    label = clean(el.getAttribute('aria-label') || (el.labels && el.labels.length ? textOf(el.labels[0]) : ''));
  }
  // A field's content, or an input button's drawn label. A checkbox's or radio button's
  // value attribute ("on" by default) is never drawn (its state is `checked`), nor is an
  // option's (a select lists its chosen option's text).
  var value = '';
  var undrawn = tag === 'button' || tag === 'li' || tag === 'select' || tag === 'option' ||
    (tag === 'input' && (el.type === 'checkbox' || el.type === 'radio'));
  if ('value' in el && typeof el.value === 'string' && !undrawn) value = el.value;
  // A field's text in the colour of its box (or transparent) is not there for a person.
  if (value && (tag === 'input' || tag === 'textarea') && !legible(el, style(el), r.left + 2, r.top + r.height / 2)) value = '';
  out.push({
    tag: tag, id: el.id || '', classes: (typeof el.className === 'string') ? el.className : '',
    text: text, label: label, value: value, input_type: tag === 'input' ? (el.type || 'text') : '',
    checked: !!(el.checked || el.selected), focused: document.activeElement === el, name: el.getAttribute('name') || '',
    bbox: { x: r.left - o[0], y: r.top - o[1], w: r.width, h: r.height }
  });
}
if (document.body) {
  document.querySelectorAll(SEL).forEach(consider);
  jqClicks(document);
  var all = document.body.getElementsByTagName('*');
  for (var i = 0; i < all.length && i < 5000; i++) {
    var el = all[i];
    if (jqData) jqClicks(el);
    if (seen.has(el)) continue;
    // Elements made clickable by script (d3/jQuery handlers) usually say so with the cursor.
    if (scripted(el) || (style(el).cursor === 'pointer' && (!el.parentElement || style(el.parentElement).cursor !== 'pointer'))) consider(el);
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
