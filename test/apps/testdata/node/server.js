// The shop, as an app team writes it with express-session (its in-memory
// store, sessions held by this process), and the count drainctl reads.
const express = require('express');
const session = require('express-session');

const app = express();
const store = new session.MemoryStore();

// The count, before the session middleware so that asking creates
// nothing; reachable from localhost only.
app.get('/sessions', (req, res) => {
  if (!['127.0.0.1', '::1', '::ffff:127.0.0.1'].includes(req.socket.remoteAddress)) {
    return res.status(403).end();
  }
  store.length((err, n) => (err ? res.status(500).end(String(err)) : res.type('text').send(`${n}\n`)));
});
// The probe's path: it touches no session.
app.get('/healthz', (req, res) => res.type('text').send('ok\n'));

app.use(session({
  store,
  secret: process.env.SESSION_SECRET || 'not-a-secret',
  resave: false,
  // false: a request that stores nothing in its session (a probe, a
  // load balancer's check, a crawler) creates no session.
  saveUninitialized: process.env.SAVE_UNINITIALIZED === 'true',
  cookie: { maxAge: 30 * 60 * 1000 },
}));

// The landing page renders the login form with a CSRF token kept in the
// session, as form pages do: every cookie-less request here stores a
// session, whatever saveUninitialized says.
app.get('/', (req, res) => {
  req.session.csrf ??= require('crypto').randomBytes(16).toString('hex');
  res.type('text').send(`welcome; csrf ${req.session.csrf}\n`);
});
app.post('/login', (req, res) => {
  req.session.user = req.query.user || 'someone';
  res.type('text').send(`logged in as ${req.session.user}\n`);
});
app.get('/cart', (req, res) => {
  if (!req.session.user) return res.status(401).type('text').send('no session\n');
  res.type('text').send(`cart of ${req.session.user}\n`);
});
app.post('/logout', (req, res) => req.session.destroy(() => res.type('text').send('logged out\n')));

const port = Number(process.env.PORT || 8080);
app.listen(port, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${port}`));
