// Run before every page read of a headless browser (prepended to observe.js); installs
// itself once per document. Native popups live in widgets of their own that the headless
// shell neither draws into the screenshot nor answers input in, and a capture taken while
// a <select>'s list was open hung under load (the env_error of issue 36). So:
// - a single-choice <select> opens a list drawn in the page instead (below the select,
//   its options as role=option items an agent sees and clicks; arrows and Enter work in
//   it, Escape closes it); choosing fires input and change as the native list does;
// - a date or time field's picker button does nothing (the field takes typed dates, as
//   the native picker is never drawn);
// - alert / confirm / prompt are accepted by the DevTools channel (src/env/devtools.rs)
//   or by WebDriver's unhandledPromptBehavior.
if (!window.__guirlPopups) {
  window.__guirlPopups = true;
  (function () {
    var open = null; // { select, box, items, at }
    function single(el) {
      return !!el && el.tagName === 'SELECT' && !el.multiple && el.size <= 1 && !el.disabled;
    }
    function close() {
      if (open) { open.box.remove(); open = null; }
    }
    function mark(i) {
      open.items.forEach(function (it, j) {
        it.style.background = j === i ? '#1e90ff' : '';
        it.style.color = j === i ? '#fff' : (open.select.options[j].disabled ? '#999' : '');
      });
      open.at = i;
      if (open.items[i]) open.items[i].scrollIntoView({ block: 'nearest' });
    }
    function choose(sel, i) {
      close();
      sel.focus();
      if (i >= 0 && sel.selectedIndex !== i && !sel.options[i].disabled) {
        sel.selectedIndex = i;
        sel.dispatchEvent(new Event('input', { bubbles: true }));
        sel.dispatchEvent(new Event('change', { bubbles: true }));
      }
    }
    function show(sel) {
      close();
      var r = sel.getBoundingClientRect(), cs = getComputedStyle(sel);
      var box = document.createElement('div');
      box.setAttribute('role', 'listbox');
      box.style.cssText = 'position:fixed;z-index:2147483647;box-sizing:border-box;margin:0;padding:0;' +
        'background:#fff;color:#000;border:1px solid #767676;overflow-y:auto;text-align:left;';
      box.style.font = cs.font;
      box.style.left = r.left + 'px';
      box.style.minWidth = r.width + 'px';
      var below = innerHeight - r.bottom, above = r.top;
      var items = Array.prototype.map.call(sel.options, function (o, i) {
        var it = document.createElement('div');
        it.setAttribute('role', 'option');
        it.textContent = o.text;
        it.style.cssText = 'padding:1px 4px;white-space:pre;cursor:default;';
        it.addEventListener('mousedown', function (e) { e.preventDefault(); });
        it.addEventListener('click', function (e) { e.stopPropagation(); if (!o.disabled) choose(sel, i); });
        box.appendChild(it);
        return it;
      });
      (document.body || document.documentElement).appendChild(box);
      // Below the select where it fits, else above it where there is more room.
      var h = box.offsetHeight;
      if (h <= below || below >= above) {
        box.style.top = r.bottom + 'px';
        box.style.maxHeight = below + 'px';
      } else {
        box.style.top = Math.max(0, r.top - h) + 'px';
        box.style.maxHeight = above + 'px';
      }
      open = { select: sel, box: box, items: items, at: sel.selectedIndex };
      mark(sel.selectedIndex);
    }
    addEventListener('mousedown', function (e) {
      if (open && open.box.contains(e.target)) return;
      var sel = e.target.closest ? e.target.closest('select') : null;
      if (e.button === 0 && single(sel)) {
        // The native list opens as this event's default action: keep it shut.
        e.preventDefault();
        var again = open && open.select === sel;
        sel.focus();
        if (again) close(); else show(sel);
        return;
      }
      close();
    }, true);
    addEventListener('keydown', function (e) {
      if (open) {
        var n = open.items.length, i = open.at;
        var step = { ArrowDown: 1, ArrowUp: -1, PageDown: 10, PageUp: -10 }[e.key];
        if (step) {
          do { i = Math.max(0, Math.min(n - 1, i + step)); } while (open.select.options[i].disabled && i > 0 && i < n - 1);
          mark(i);
        } else if (e.key === 'Home' || e.key === 'End') {
          mark(e.key === 'Home' ? 0 : n - 1);
        } else if (e.key === 'Enter' || e.key === ' ') {
          choose(open.select, open.at);
        } else if (e.key === 'Escape') {
          close();
        } else {
          close();
          return;
        }
        e.preventDefault();
        e.stopPropagation();
        return;
      }
      var sel = e.target;
      if (!single(sel)) return;
      // The keys that open the native list on Linux.
      var opens = (e.key === ' ' && !e.ctrlKey && !e.altKey && !e.metaKey) || e.key === 'F4' ||
        (e.altKey && (e.key === 'ArrowDown' || e.key === 'ArrowUp'));
      if (opens) {
        e.preventDefault();
        show(sel);
      }
    }, true);
    addEventListener('scroll', close, true);
    addEventListener('resize', close);
    // A date or time field's picker button sits at the right end of its box.
    var PICKERS = { date: 1, time: 1, 'datetime-local': 1, month: 1, week: 1 };
    function onPicker(e) {
      var el = e.target;
      if (!el || el.tagName !== 'INPUT' || !PICKERS[el.type]) return false;
      var r = el.getBoundingClientRect(), cs = getComputedStyle(el);
      var inner = r.right - parseFloat(cs.borderRightWidth) - parseFloat(cs.paddingRight);
      return e.clientX >= inner - 20;
    }
    ['mousedown', 'click'].forEach(function (t) {
      addEventListener(t, function (e) { if (onPicker(e)) e.preventDefault(); }, true);
    });
    if (window.HTMLInputElement && HTMLInputElement.prototype.showPicker) {
      var native = HTMLInputElement.prototype.showPicker;
      HTMLInputElement.prototype.showPicker = function () {
        if (PICKERS[this.type]) return;
        return native.call(this);
      };
    }
    if (window.HTMLSelectElement && HTMLSelectElement.prototype.showPicker) {
      HTMLSelectElement.prototype.showPicker = function () { if (single(this)) show(this); };
    }
  })();
}
