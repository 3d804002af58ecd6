// guirl's input capture (see capture.rs): installs listeners in this document once, then
// hands over the actions completed since the last call. Coordinates are CSS client
// pixels; guirl converts them to screenshot pixels. A function body run by GuiEnv.
var KEY = '__guirl_capture';
var DOUBLE_MS = 350; // a click waits this long for a second press (a double click)
var TYPE_GAP_MS = 300; // a typing run ends after this long without a key
var WHEEL_GAP_MS = 300; // a scroll ends after this long without a wheel event
var DRAG_PX = 5; // a press that moves farther than this before release is a drag
var c = window[KEY];
var installed = false;
if (!c) {
  installed = true;
  c = window[KEY] = { queue: [], seq: 0, press: null, click: null, typing: null, wheel: null };
  // What was captured just before a navigation survives it (same origin, same tab).
  try {
    var saved = JSON.parse(sessionStorage.getItem(KEY) || '[]');
    if (Array.isArray(saved)) c.queue = saved;
  } catch (e) {}
  var save = function () {
    try { sessionStorage.setItem(KEY, JSON.stringify(c.queue)); } catch (e) {}
  };
  var push = function (a) {
    a.dpr = window.devicePixelRatio || 1;
    c.queue.push(a);
    save();
  };
  var flushClick = function () { if (c.click) { push(c.click); c.click = null; } };
  var flushTyping = function () {
    if (c.typing) { push({ kind: 'type', text: c.typing.text }); c.typing = null; }
  };
  var flushWheel = function () {
    if (c.wheel) { push({ kind: 'scroll', x: c.wheel.x, y: c.wheel.y, dx: c.wheel.dx, dy: c.wheel.dy }); c.wheel = null; }
  };
  c.tick = function () {
    var t = Date.now();
    if (c.click && t - c.click.t > DOUBLE_MS) flushClick();
    if (c.typing && t - c.typing.t > TYPE_GAP_MS) flushTyping();
    if (c.wheel && t - c.wheel.t > WHEEL_GAP_MS) flushWheel();
  };
  var mods = function (e, shift) {
    var m = [];
    if (e.ctrlKey) m.push('ctrl');
    if (e.altKey) m.push('alt');
    if (shift && e.shiftKey) m.push('shift');
    if (e.metaKey) m.push('meta');
    return m;
  };
  window.addEventListener('mousedown', function (e) {
    if (!e.isTrusted) return;
    c.seq++;
    flushTyping();
    flushWheel();
    var x = e.clientX, y = e.clientY;
    if (e.button === 2) {
      flushClick();
      push({ kind: 'right_click', x: x, y: y });
      return;
    }
    if (e.button !== 0) return;
    var near = c.click && Math.abs(c.click.x - x) <= DRAG_PX && Math.abs(c.click.y - y) <= DRAG_PX;
    if (near && e.detail >= 2) {
      c.press = { x: c.click.x, y: c.click.y, double: true };
      c.click = null;
    } else {
      flushClick();
      c.press = { x: x, y: y, double: false };
    }
  }, true);
  window.addEventListener('mouseup', function (e) {
    if (!e.isTrusted || e.button !== 0 || !c.press) return;
    var p = c.press;
    c.press = null;
    var moved = Math.abs(e.clientX - p.x) > DRAG_PX || Math.abs(e.clientY - p.y) > DRAG_PX;
    if (p.double) {
      push({ kind: 'double_click', x: p.x, y: p.y });
    } else if (moved) {
      push({ kind: 'drag', x: p.x, y: p.y, x2: e.clientX, y2: e.clientY });
    } else {
      c.click = { kind: 'click', x: p.x, y: p.y, t: Date.now() };
    }
  }, true);
  window.addEventListener('keydown', function (e) {
    if (!e.isTrusted || e.isComposing) return;
    var k = e.key;
    if (['Shift', 'Control', 'Alt', 'Meta', 'AltGraph', 'CapsLock', 'OS', 'Dead', 'Process',
         'Unidentified'].indexOf(k) >= 0) return;
    c.seq++;
    flushClick();
    flushWheel();
    if (Array.from(k).length === 1 && !e.ctrlKey && !e.altKey && !e.metaKey) {
      if (!c.typing) c.typing = { text: '' };
      c.typing.text += k;
      c.typing.t = Date.now();
      return;
    }
    flushTyping();
    push({ kind: 'key', key: k === ' ' ? 'Space' : k, mods: mods(e, true) });
  }, true);
  window.addEventListener('wheel', function (e) {
    if (!e.isTrusted) return;
    c.seq++;
    flushTyping();
    flushClick();
    var s = e.deltaMode === 1 ? 40 : e.deltaMode === 2 ? window.innerHeight : 1;
    var w = c.wheel;
    if (!(w && Math.abs(w.x - e.clientX) <= DRAG_PX && Math.abs(w.y - e.clientY) <= DRAG_PX)) {
      flushWheel();
      w = c.wheel = { x: e.clientX, y: e.clientY, dx: 0, dy: 0 };
    }
    w.dx += e.deltaX * s;
    w.dy += e.deltaY * s;
    w.t = Date.now();
  }, true);
}
c.tick();
var out = c.queue;
c.queue = [];
if (out.length) {
  try { sessionStorage.removeItem(KEY); } catch (e) {}
}
return {
  actions: out,
  pending: !!(c.press || c.click || c.typing || c.wheel),
  seq: c.seq,
  installed: installed,
  // Where the viewport's top-left is on the screen, assuming side borders as wide as the
  // bottom one and the browser's own bars on top (Chromium's layout).
  screen: (function () {
    var b = Math.max(0, (window.outerWidth - window.innerWidth) / 2);
    return [window.screenX + b, window.screenY + window.outerHeight - window.innerHeight - b];
  })()
};
