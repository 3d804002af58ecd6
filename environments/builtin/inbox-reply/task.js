// inbox-reply: find the message from a sender in the inbox (index.html), open it
// (message.html?id=), reply to it or forward it (compose.html?mode=reply|forward&id=), send.
var SUBJECTS = ['Lunch on Friday?', 'Quarterly report', 'Team offsite', 'Invoice #4411', 'Project kickoff',
  'Holiday schedule', 'Budget review', 'New office plants', 'Code review', 'Travel plans', 'Weekly sync', 'Welcome aboard'];
var BODIES = ['Could you take a look when you have a minute?', 'Let me know what you think.',
  'The draft is attached; comments welcome.', 'Please confirm by the end of the week.',
  'Thanks again for your help with this.', 'We moved the meeting to room 4B.'];
var REPLIES = ['Sounds good', 'See you at 5', 'Thanks, got it', 'I will be there', 'Count me in', 'Done, thanks',
  'Looks great to me', 'Let us talk tomorrow', 'On my way', 'Sorry, I cannot make it'];
guirl.define({
  generate: function (r, U) {
    var used = {};
    var n = U.int(r, 4, 6);
    var msgs = [];
    var subjects = U.sample(r, SUBJECTS, n);
    for (var i = 0; i < n; i++) {
      var p = guirl.person(r, used);
      msgs.push({ id: i, from: p.full, email: p.email, subject: subjects[i], body: U.pick(r, BODIES),
        time: U.int(r, 8, 17) + ':' + String(U.int(r, 0, 59)).padStart(2, '0') });
    }
    var t = U.int(r, 0, n - 1);
    var mode = r() < 0.5 ? 'reply' : 'forward';
    var data = { msgs: msgs, target: t, mode: mode };
    var instruction;
    if (mode === 'reply') {
      data.text = U.pick(r, REPLIES);
      instruction = 'Reply to the email from "' + msgs[t].from + '" with the text "' + data.text + '".';
    } else {
      data.to = guirl.person(r, used).email;
      instruction = 'Forward the email from "' + msgs[t].from + '" to "' + data.to + '".';
    }
    return { instruction: instruction, data: data };
  },
});
function topBar(app, title) {
  var h = guirl.h;
  app.appendChild(h('div', { id: 'bar' }, [h('a', { id: 'inbox-link', href: 'index.html', text: 'Inbox' }), h('span', { text: title })]));
}
