/* guirl built-in task runtime. Every page of every built-in task loads this file first:
 *
 *   <script src="/builtin/common.js"></script>
 *
 * It defines the page protocol the Rust env relies on:
 *
 *   guirlTask.reset(seed)  -> instruction   (re)start an episode, render the start view
 *   guirlTask.status()     -> {done, reward, raw_reward, reason}
 *   guirlTask.instruction()-> the current instruction (or null before the first reset)
 *
 * and, for the task pages themselves, `window.guirl`: a seeded PRNG, data pools, a tiny
 * DOM builder and the episode store. Episode state lives in sessionStorage under a key
 * per task, so it survives navigation between the pages of a multi-page task.
 *
 * A task's pages use it like this:
 *
 *   guirl.define({ generate: function (rng, U) { return {instruction, data}; } });  // task.js
 *   guirl.page(function render(app, st) { ... build the view into `app` ... });      // page
 *
 * `render` builds the whole view into a fresh `#app` every time, so handlers of an earlier
 * episode go away with the nodes they were attached to.
 */
(function () {
  'use strict';

  var m = location.pathname.match(/\/builtin\/([^\/]+)\//);
  var TASK = m ? m[1] : 'unknown';
  var KEY = 'guirl:builtin:' + TASK;
  var generator = null;
  var renderFn = null;

  // ---------------------------------------------------------------- episode store
  function load() {
    try {
      var s = sessionStorage.getItem(KEY);
      return s ? JSON.parse(s) : null;
    } catch (e) {
      return null;
    }
  }
  function save(st) {
    sessionStorage.setItem(KEY, JSON.stringify(st));
  }
  function update(fn) {
    var st = load();
    if (!st) return null;
    fn(st);
    save(st);
    return st;
  }
  /* Ends the episode with `reward` (1 success, -1 definite failure). The first outcome
   * sticks: later calls do nothing. */
  function finish(reward, reason) {
    var st = load();
    if (!st || st.done) return st;
    st.done = true;
    st.reward = reward;
    st.raw_reward = reward;
    st.reason = reason;
    save(st);
    return st;
  }

  // ---------------------------------------------------------------- seeded randomness
  function fnv1a(s) {
    var h = 0x811c9dc5;
    for (var i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193);
    }
    return h >>> 0;
  }
  /* mulberry32, seeded from the integer seed (up to 2^53) mixed with the task name. */
  function rng(seed) {
    var lo = seed >>> 0;
    var hi = Math.floor(seed / 4294967296) >>> 0;
    var a = (lo ^ Math.imul(hi, 0x9e3779b1) ^ fnv1a(TASK)) >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) | 0;
      var t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  var U = {
    /* Integer in [lo, hi]. */
    int: function (r, lo, hi) {
      return lo + Math.floor(r() * (hi - lo + 1));
    },
    pick: function (r, a) {
      return a[Math.floor(r() * a.length)];
    },
    shuffle: function (r, a) {
      a = a.slice();
      for (var i = a.length - 1; i > 0; i--) {
        var j = Math.floor(r() * (i + 1));
        var t = a[i];
        a[i] = a[j];
        a[j] = t;
      }
      return a;
    },
    sample: function (r, a, k) {
      return U.shuffle(r, a).slice(0, k);
    },
    cap: function (s) {
      return s.charAt(0).toUpperCase() + s.slice(1);
    },
    same: function (a, b) {
      return String(a).trim().toLowerCase() === String(b).trim().toLowerCase();
    },
  };

  var pools = {
    first: ['Ana', 'Ben', 'Carla', 'David', 'Emma', 'Felix', 'Grace', 'Hugo', 'Iris', 'Jonas',
      'Kara', 'Liam', 'Maya', 'Noah', 'Olga', 'Pablo', 'Quinn', 'Rosa', 'Sam', 'Tara', 'Umar',
      'Vera', 'Wes', 'Yara', 'Zoe'],
    last: ['Lopez', 'Smith', 'Chen', 'Novak', 'Patel', 'Kim', 'Garcia', 'Muller', 'Rossi',
      'Silva', 'Brown', 'Khan', 'Ito', 'Berg', 'Dubois', 'Jensen', 'Costa', 'Ward', 'Nagy',
      'Reyes'],
    colors: [
      ['red', '#e53935'], ['orange', '#fb8c00'], ['yellow', '#fdd835'], ['green', '#43a047'],
      ['blue', '#1e88e5'], ['purple', '#8e24aa'], ['pink', '#f48fb1'], ['brown', '#795548'],
      ['gray', '#9e9e9e'], ['black', '#212121'], ['white', '#ffffff'], ['cyan', '#00bcd4'],
    ],
    nouns: ['apple', 'chair', 'lamp', 'book', 'phone', 'cup', 'key', 'sock', 'hat', 'clock',
      'plant', 'shoe', 'pen', 'bag', 'ball', 'fork', 'kite', 'drum', 'coin', 'bell'],
    adjectives: ['quiet', 'brave', 'shiny', 'rapid', 'calm', 'lucky', 'misty', 'silent',
      'golden', 'bold', 'gentle', 'proud', 'swift', 'tiny', 'wild', 'frosty', 'sunny', 'windy',
      'dusty', 'lazy'],
    things: ['otter', 'falcon', 'maple', 'river', 'comet', 'harbor', 'canyon', 'meadow',
      'pebble', 'lantern', 'willow', 'badger', 'summit', 'glacier', 'orchid', 'thunder',
      'cedar', 'ember', 'prairie', 'raven'],
    cities: ['Springfield', 'Riverton', 'Lakeside', 'Fairview', 'Greenville', 'Milford',
      'Oakdale', 'Ashland', 'Clifton', 'Dover', 'Franklin', 'Georgetown', 'Hudson', 'Kingston',
      'Madison', 'Newport', 'Salem', 'Burlington'],
    streets: ['Oak St', 'Maple Ave', 'Pine Rd', 'Cedar Ln', 'Elm St', 'Hill Rd', 'Lake Dr',
      'Park Ave', 'River Rd', 'Main St', 'Mill Ln', 'Bay St'],
  };
  /* A random person {first, last, full, user, email}; `used` keeps full names unique. */
  function person(r, used) {
    for (var i = 0; i < 200; i++) {
      var f = U.pick(r, pools.first);
      var l = U.pick(r, pools.last);
      var full = f + ' ' + l;
      if (used && used[full]) continue;
      if (used) used[full] = true;
      return {
        first: f, last: l, full: full,
        user: (f.charAt(0) + l).toLowerCase(),
        email: (f + '.' + l).toLowerCase() + '@example.com',
      };
    }
    throw new Error('person pool exhausted');
  }

  // ---------------------------------------------------------------- DOM helpers
  /* h('button', {id: 'x', class: 'y', text: 'Go', onclick: fn, style: {...}}, [children]) */
  function h(tag, props, children) {
    var el = document.createElement(tag);
    props = props || {};
    Object.keys(props).forEach(function (k) {
      var v = props[k];
      if (v === undefined || v === null || v === false) return;
      if (k === 'text') el.textContent = v;
      else if (k === 'class') el.className = v;
      else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
      else if (k.slice(0, 2) === 'on' && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'value') el.value = v;
      else if (k === 'checked') el.checked = !!v;
      else el.setAttribute(k, v === true ? '' : v);
    });
    (children || []).forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      el.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return el;
  }

  function header(st) {
    var bar = document.getElementById('instr');
    if (!bar) {
      bar = document.createElement('div');
      bar.id = 'instr';
      document.body.insertBefore(bar, document.body.firstChild);
    }
    bar.textContent = st ? st.instruction : 'Waiting for guirlTask.reset(seed).';
  }
  function appRoot() {
    var app = document.getElementById('app');
    if (!app) {
      app = document.createElement('div');
      app.id = 'app';
      document.body.appendChild(app);
    }
    return app;
  }
  /* Re-renders the current page from the stored episode state. */
  function rerender() {
    var st = load();
    header(st);
    var old = appRoot();
    var app = old.cloneNode(false); // fresh node: no children, no listeners
    old.parentNode.replaceChild(app, old);
    if (st && renderFn) renderFn(app, st);
  }
  function isStartPage() {
    var p = location.pathname;
    return p.slice(-11) === '/index.html' || p.slice(-1) === '/';
  }

  window.guirl = {
    task: TASK,
    U: U,
    pools: pools,
    person: person,
    h: h,
    state: load,
    save: save,
    update: update,
    finish: finish,
    rerender: rerender,
    /* URL query parameter of the current page. */
    param: function (name) {
      return new URLSearchParams(location.search).get(name);
    },
    /* Scrolls `el` on the main thread as each wheel event arrives (by the same amount the
     * browser would), so a screenshot taken right after a wheel action already shows the
     * new offset; the compositor's own scroll can land a frame later under load. */
    syncWheel: function (el) {
      el.addEventListener('wheel', function (e) {
        var k = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? el.clientHeight : 1;
        el.scrollTop += e.deltaY * k;
        el.scrollLeft += e.deltaX * k;
        e.preventDefault();
      }, { passive: false });
    },
    /* Registers the task's episode generator: generate(rng, U) -> {instruction, data}. */
    define: function (def) {
      generator = def.generate;
    },
    /* Registers this page's view and renders it from the stored state (if any). */
    page: function (render) {
      renderFn = render;
      // For people playing a task by hand: index.html#seed=N starts episode N on load.
      var hs = location.hash.match(/^#seed=(\d+)$/);
      if (hs && generator && isStartPage()) window.guirlTask.reset(Number(hs[1]));
      else rerender();
    },
  };

  window.guirlTask = {
    reset: function (seed) {
      seed = Number(seed);
      if (!isFinite(seed) || Math.floor(seed) !== seed || seed < 0) {
        throw new Error('guirlTask.reset(seed): seed must be a non-negative integer, got ' + seed);
      }
      if (!generator) throw new Error('guirlTask.reset: task ' + TASK + ' defines no generator');
      var g = generator(rng(seed), U);
      var st = {
        task: TASK, seed: seed, instruction: g.instruction, data: g.data, progress: {},
        done: false, reward: 0, raw_reward: 0, reason: null,
      };
      save(st);
      if (document.activeElement && document.activeElement !== document.body && document.activeElement.blur) {
        document.activeElement.blur();
      }
      var sel = window.getSelection && window.getSelection();
      if (sel) sel.removeAllRanges();
      window.scrollTo(0, 0);
      if (isStartPage()) rerender();
      else location.replace('index.html');
      return st.instruction;
    },
    status: function () {
      var st = load();
      if (!st) return { done: false, reward: 0, raw_reward: 0, reason: 'no episode: call guirlTask.reset(seed)' };
      return { done: !!st.done, reward: st.reward, raw_reward: st.raw_reward, reason: st.reason };
    },
    instruction: function () {
      var st = load();
      return st ? st.instruction : null;
    },
  };
})();
