// login-settings: sign in (index.html), open Settings from the dashboard (dashboard.html),
// change one field (settings.html) and save. Shared by all three pages.
var FIELDS = [
  { key: 'displayname', label: 'Display name', phrase: 'display name' },
  { key: 'email', label: 'Email', phrase: 'email' },
  { key: 'phone', label: 'Phone', phrase: 'phone number' },
];
function phoneNumber(r, U) { return '555-' + U.int(r, 1000, 9999); }
guirl.define({
  generate: function (r, U) {
    var p = guirl.person(r);
    var user = p.user + U.int(r, 1, 99);
    var chars = 'abcdefghjkmnpqrstuvwxyz23456789';
    var pass = '';
    for (var i = 0; i < 6; i++) pass += chars.charAt(U.int(r, 0, chars.length - 1));
    var current = { displayname: p.full, email: p.email, phone: phoneNumber(r, U) };
    var f = U.pick(r, FIELDS);
    var value;
    if (f.key === 'displayname') value = U.pick(r, [p.first + ' ' + p.last.charAt(0) + '.', p.first.charAt(0) + '. ' + p.last, guirl.person(r).full]);
    else if (f.key === 'email') value = (p.first.charAt(0) + p.last + U.int(r, 1, 99)).toLowerCase() + '@' + U.pick(r, ['mail.org', 'post.net', 'inbox.io']);
    else value = phoneNumber(r, U);
    return {
      instruction: 'Sign in as "' + user + '" with password "' + pass + '", then in Settings change your ' +
        f.phrase + ' to "' + value + '" and save.',
      data: { user: user, pass: pass, name: p.first, current: current, field: f.key, value: value,
        nav: U.shuffle(r, ['home', 'messages', 'settings', 'logout']), news: U.int(r, 1, 9), storage: U.int(r, 10, 95) },
    };
  },
});
/* The view for pages that need a signed-in user, when nobody is. */
function signedOut(app) {
  var h = guirl.h;
  app.appendChild(h('p', { text: 'You are not signed in.' }));
  app.appendChild(h('a', { id: 'to-login', href: 'index.html', text: 'Sign in' }));
}
function navBar(app, st) {
  var h = guirl.h;
  var labels = { home: 'Home', messages: 'Messages', settings: 'Settings', logout: 'Log out' };
  var hrefs = { home: 'dashboard.html', messages: '#', settings: 'settings.html', logout: 'index.html' };
  var nav = h('div', { id: 'nav' });
  st.data.nav.forEach(function (k) {
    nav.appendChild(h('a', { id: 'nav-' + k, href: hrefs[k], text: labels[k], onclick: function (e) {
      if (k === 'messages') e.preventDefault();
      if (k === 'logout') guirl.update(function (s) { s.progress.loggedIn = false; });
    } }));
  });
  app.appendChild(nav);
}
