// A real OpenID Connect provider for the test suite: the npm package `oidc-provider`, on 127.0.0.1.
// Started by tests/identity_providers.py with one argument, the path of a JSON file:
//   {"clients": [{"client_id", "client_secret", "redirect_uris": [...]}], "accounts_file": "..."}
// It prints one JSON line {"issuer": "http://127.0.0.1:PORT"} once it listens.
//
// Accounts are read from accounts_file on every lookup, so a test can change an account's email or
// its email_verified flag while the provider runs. The login form is oidc-provider's own development
// form (any password); consent is granted automatically, so a sign-in is one form submission.
import { readFileSync } from 'node:fs';
import http from 'node:http';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

function readAccounts() {
  return JSON.parse(readFileSync(config.accounts_file, 'utf8'));
}

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: config.clients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      redirect_uris: c.redirect_uris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
    })),
    cookies: { keys: ['inboxd-test-idp-cookie-key'] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    features: { devInteractions: { enabled: true } },
    // As Google does, put the email claims in the ID token itself (they are also at userinfo).
    conformIdTokenClaims: false,
    // Skip the consent screen: every requested scope and claim is granted on sign-in.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) {
        return ctx.oidc.provider.Grant.find(grantId);
      }
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope('openid email profile');
      grant.addOIDCClaims(['email', 'email_verified', 'name']);
      await grant.save();
      return grant;
    },
    findAccount: async (ctx, sub) => {
      const claims = readAccounts()[sub];
      if (!claims) {
        return undefined;
      }
      return { accountId: sub, claims: async () => ({ sub, ...claims }) };
    },
    ttl: { Interaction: 600, Session: 600, Grant: 600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
  });
  provider.on('server_error', (ctx, err) => { console.error('server_error', err); });
  server.on('request', provider.callback());
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});

process.on('SIGTERM', () => { server.close(); process.exit(0); });
