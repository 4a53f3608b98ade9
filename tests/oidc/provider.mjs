// A real OpenID provider for trainledger's OIDC tests: panva/oidc-provider 9 (tests/oidc/package.json), with its
// own small login page (a form that checks a password), PKCE required, RP-initiated logout, and keys read from a
// private JWKS file (the first key signs; a test rotates keys by restarting the provider with another file).
//
//   node tests/oidc/provider.mjs CONFIG.json
//
// CONFIG.json: {"port": 0, "issuer": "http://127.0.0.1:PORT", "jwks_file": "keys.json",
//               "clients": [oidc-provider client metadata, ...],
//               "users": {"LOGIN": {"password": "...", "claims": {"groups": [...], "email": "..."}}},
//               "id_token_ttl": 600}
// It prints "listening ISSUER" once it accepts connections. Nothing is downloaded; it binds 127.0.0.1 only.

import fs from 'node:fs';
import http from 'node:http';
import { timingSafeEqual } from 'node:crypto';

import Provider from 'oidc-provider';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const jwks = JSON.parse(fs.readFileSync(config.jwks_file, 'utf8'));
const users = config.users;

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title, body) => `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>
</head><body><main><h1>${esc(title)}</h1>${body}</main></body></html>`;

function passwordOk(login, password) {
  const user = Object.hasOwn(users, login) ? users[login] : undefined;
  const want = Buffer.from(user ? user.password : 'no such user, no such password');
  const got = Buffer.from(String(password ?? ''));
  return Boolean(user) && want.length === got.length && timingSafeEqual(want, got);
}

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks,
  cookies: { keys: ['trainledger-test-provider-cookie-key'] },
  claims: {
    openid: ['sub'], profile: ['preferred_username', 'name'], email: ['email', 'email_verified'],
    groups: ['groups'], roles: ['roles'],
  },
  conformIdTokenClaims: false, // the scope's claims go into the ID token as well (groups)
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      logoutSource: async (ctx, form) => {
        ctx.body = page('Sign out of the test provider?', `${form}
<button autofocus type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>`);
      },
      postLogoutSuccessSource: async (ctx) => { ctx.body = page('Signed out of the test provider', ''); },
    },
  },
  ttl: { IdToken: config.id_token_ttl ?? 600, AccessToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
  findAccount: async (ctx, id) => (Object.hasOwn(users, id) ? {
    accountId: id,
    claims: async () => ({ sub: id, preferred_username: id, ...users[id].claims }),
  } : undefined),
  // first-party test clients: every requested scope is granted without a consent page
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(ctx.oidc.requestParamScopes ? [...ctx.oidc.requestParamScopes].join(' ') : 'openid');
    await grant.save();
    return grant;
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  renderError: async (ctx, out) => { ctx.type = 'html'; ctx.body = page('Provider error', `<p>${esc(out.error)}: ${esc(out.error_description ?? '')}</p>`); },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));

function loginForm(uid, message) {
  return page('Sign in to the test provider', `${message ? `<p role="alert">${esc(message)}</p>` : ''}
<form method="post" action="/interaction/${esc(uid)}/login" autocomplete="off">
<label for="login">Username</label> <input id="login" name="login" required autofocus>
<label for="password">Password</label> <input id="password" name="password" type="password" required>
<button type="submit">Sign in</button></form>`);
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) { body += chunk; if (body.length > 8192) break; }
  return new URLSearchParams(body);
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  if (details.prompt.name !== 'login') { // consent: granted by loadExistingGrant
    return provider.interactionFinished(req, res, { consent: {} }, { mergeWithLastSubmission: true });
  }
  if (req.method === 'POST' && action === 'login') {
    const form = await readForm(req);
    const login = form.get('login') ?? '';
    if (passwordOk(login, form.get('password'))) {
      return provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
    }
    res.writeHead(401, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    return res.end(loginForm(uid, 'Wrong username or password.'));
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  return res.end(loginForm(uid, ''));
}

const callback = provider.callback();
const server = http.createServer((req, res) => {
  const match = /^\/interaction\/([A-Za-z0-9_-]+)(?:\/(login))?$/.exec(new URL(req.url, config.issuer).pathname);
  if (!match) return callback(req, res);
  return interaction(req, res, match[1], match[2]).catch((err) => {
    res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' });
    res.end(page('Interaction failed', `<p>${esc(err.message)}</p>`));
  });
});
server.listen(config.port, '127.0.0.1', () => console.log(`listening ${config.issuer}`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
