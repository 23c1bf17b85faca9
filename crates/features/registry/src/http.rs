//! The distribution API's requests for one repository: manifests by tag
//! or digest, blobs from an offset, and the bearer token a registry may
//! ask for first.

use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use ureq::http::{Response, StatusCode};
use ureq::tls::{RootCerts, TlsConfig};
use ureq::{Agent, Body};

use crate::auth::Credentials;
use crate::error::{Failure, RegistryError as Error, Result};
use crate::reference::Reference;
use crate::transfer::Watch;

/// The manifest media types asked for, best first.
pub(crate) const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// A token response is a few KiB; an error body is shown only in part.
const MAX_TOKEN: u64 = 1 << 20;
const MAX_ERROR_SHOWN: u64 = 4096;

/// How long to wait for a connection, and for each read: long enough for
/// a loaded registry, short enough that a dead one is retried soon.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a request may take to answer with its head, a token
/// fetched on the way included.
const REQUEST_DEADLINE: Duration = Duration::from_secs(90);

/// One repository of one registry.
pub(crate) struct Remote {
    agent: Agent,
    base: String,
    pub(crate) reference: Reference,
    credentials: Option<Credentials>,
    /// The bearer token last granted, for the pull scope.
    token: Mutex<Option<String>>,
    /// The pull's cancel flag and stall rule.
    pub(crate) watch: Watch,
    /// Whether the registry's name resolved, the first time it was
    /// needed: a name that does not is a failure no retry mends.
    name: OnceLock<std::result::Result<(), Unresolved>>,
}

/// A registry's name that did not resolve, kept for later requests.
#[derive(Clone, Debug)]
struct Unresolved {
    host: String,
    /// The resolver's error; `None` when it found no address.
    error: Option<Arc<std::io::Error>>,
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.error {
            None => {
                write!(f, "{}: the name resolves to no address", self.host)
            }
            Some(e) => write!(f, "{}: {e}", self.host),
        }
    }
}

impl Remote {
    pub(crate) fn new(
        reference: &Reference,
        insecure: bool,
        credentials: Option<Credentials>,
        watch: Watch,
    ) -> Remote {
        let scheme = if insecure || reference.is_loopback() {
            "http"
        } else {
            "https"
        };
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::PlatformVerifier)
            // Given to this agent alone: no process-wide TLS state.
            .unversioned_rustls_crypto_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .build();
        let agent: Agent = Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(READ_TIMEOUT))
            .timeout_per_read(Some(READ_TIMEOUT))
            .user_agent(concat!("zinstall/", env!("CARGO_PKG_VERSION")))
            // Blobs are often redirected to a storage service; the
            // registry's Authorization is not sent there (ureq's default).
            .max_redirects(8)
            .build()
            .into();
        Remote {
            agent,
            base: format!("{scheme}://{}", reference.api_host()),
            reference: reference.clone(),
            credentials,
            token: Mutex::new(None),
            watch,
            name: OnceLock::new(),
        }
    }

    /// Resolves the registry's name once, here rather than inside the
    /// HTTP client, so that a failure is known for what it is (a name
    /// that does not resolve) by where it happened, not by its text.
    fn check_name(&self, url: &str) -> Result<()> {
        use std::net::ToSocketAddrs;
        let r = self.name.get_or_init(|| {
            let host = self.reference.api_host();
            let has_port = host
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.ends_with(':') && !p.ends_with(']'));
            let default = if self.base.starts_with("https") {
                443
            } else {
                80
            };
            let hp = if has_port {
                host.to_string()
            } else {
                format!("{host}:{default}")
            };
            match hp.to_socket_addrs().map(|mut a| a.next()) {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(Unresolved {
                    host: host.to_string(),
                    error: None,
                }),
                Err(e) => Err(Unresolved {
                    host: host.to_string(),
                    error: Some(Arc::new(e)),
                }),
            }
        });
        r.clone().map_err(|why| Error::Http {
            op: "GET",
            url: url.to_string(),
            kind: Failure::Name,
            why: why.to_string(),
        })
    }

    /// [`get`](Remote::get) on a thread of its own, given up on at once
    /// when the pull is cancelled, and after [`REQUEST_DEADLINE`] however
    /// the registry (or its token service) drips its answer.
    pub(crate) fn get_watched(
        self: &Arc<Self>,
        url: &str,
        accept: Option<&'static str>,
        from: Option<u64>,
    ) -> Result<Response<Body>> {
        let (me, u) = (Arc::clone(self), url.to_string());
        self.watch.call("GET", url, REQUEST_DEADLINE, move || {
            me.get(&u, accept, from)
        })
    }

    /// GET `url` from another server (a signature lookaside store):
    /// with this agent's TLS and timeouts, never the registry's
    /// credentials, given up on as [`get_watched`](Remote::get_watched)
    /// is.
    /// Its answer is waited for until `until` at the latest.
    pub(crate) fn get_elsewhere(
        self: &Arc<Self>,
        url: &str,
        until: Instant,
    ) -> Result<Response<Body>> {
        let (me, u) = (Arc::clone(self), url.to_string());
        let left = until
            .saturating_duration_since(Instant::now())
            .min(REQUEST_DEADLINE);
        self.watch.call("GET", url, left, move || {
            me.agent
                .get(&u)
                .call()
                .map_err(|e| http_error("GET", &u, e))
        })
    }

    /// Where blobs come from: the registry and repository, as a partial
    /// download's `.from` file records it.
    pub(crate) fn origin(&self) -> String {
        format!("{}/{}", self.reference.registry, self.reference.repository)
    }

    pub(crate) fn manifest_url(&self, r: &str) -> String {
        format!(
            "{}/v2/{}/manifests/{r}",
            self.base, self.reference.repository
        )
    }

    pub(crate) fn blob_url(&self, digest: &str) -> String {
        format!(
            "{}/v2/{}/blobs/{digest}",
            self.base, self.reference.repository
        )
    }

    /// GET `url`, with `accept` and a `Range` from `from` when given;
    /// asks for a token once if the registry wants one. Returns any
    /// status but 401: the caller decides what a status means.
    pub(crate) fn get(
        &self,
        url: &str,
        accept: Option<&str>,
        from: Option<u64>,
    ) -> Result<Response<Body>> {
        self.check_name(url)?;
        let mut asked = false;
        loop {
            let mut req = self.agent.get(url);
            if let Some(a) = accept {
                req = req.header("Accept", a);
            }
            if let Some(off) = from {
                req = req.header("Range", format!("bytes={off}-"));
            }
            let token = self.token.lock().expect("token lock").clone();
            if let Some(t) = token {
                req = req.header("Authorization", format!("Bearer {t}"));
            } else if let Some(c) = &self.credentials
                && c.identity_token.is_none()
            {
                req = req.header("Authorization", c.basic());
            }
            let resp = req.call().map_err(|e| http_error("GET", url, e))?;
            if resp.status() != StatusCode::UNAUTHORIZED || asked {
                if resp.status() == StatusCode::UNAUTHORIZED {
                    return Err(Error::Auth {
                        registry: self.reference.registry.clone(),
                        why: format!(
                            "GET {url}: 401 Unauthorized with the {}; give \
                             credentials in REGISTRY_AUTH_FILE, \
                             containers-auth.json or ~/.docker/config.json",
                            if self.credentials.is_some() {
                                "credentials found"
                            } else {
                                "no credentials (none found)"
                            }
                        ),
                    });
                }
                return Ok(resp);
            }
            asked = true;
            let challenge = resp
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            self.authorize(url, &challenge)?;
        }
    }

    /// Answers a `WWW-Authenticate` challenge: a bearer token from the
    /// realm it names (with the credentials, if any), or Basic with them.
    fn authorize(&self, url: &str, challenge: &str) -> Result<()> {
        let auth_err = |why: String| self.auth_err(why);
        let (scheme, params) =
            challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Err(self.basic_refused(url));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(auth_err(format!(
                "GET {url}: 401 with an authentication scheme zinstall does \
                 not speak: {challenge:?}"
            )));
        }
        let params = challenge_params(params);
        let get = |k: &str| {
            params
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        let Some(realm) = get("realm") else {
            return Err(auth_err(format!(
                "GET {url}: a bearer challenge without a realm"
            )));
        };
        if !(realm.starts_with("https://") || realm.starts_with("http://")) {
            return Err(auth_err(format!(
                "token realm {realm:?} is not an http(s) URL"
            )));
        }
        let scope = get("scope").map(str::to_string).unwrap_or_else(|| {
            format!("repository:{}:pull", self.reference.repository)
        });
        let resp = self.request_token(realm, &scope, get("service"))?;
        let t = self.token_from(realm, resp)?;
        *self.token.lock().expect("token lock") = Some(t);
        Ok(())
    }

    fn auth_err(&self, why: String) -> Error {
        Error::Auth {
            registry: self.reference.registry.clone(),
            why,
        }
    }

    /// Why a registry that asks for Basic authentication is not served:
    /// the credentials were sent with the request already.
    fn basic_refused(&self, url: &str) -> Error {
        let auth_err = |why: String| self.auth_err(why);
        match &self.credentials {
            Some(c) if c.identity_token.is_some() => auth_err(format!(
                "GET {url}: asks for Basic authentication; the \
                 credentials found are an identity token, which only \
                 a token service takes"
            )),
            // Sent already with the request; refused.
            Some(_) => auth_err(format!(
                "GET {url}: the credentials found were refused"
            )),
            None => auth_err(format!(
                "GET {url}: needs a login; no credentials found in \
                 REGISTRY_AUTH_FILE, containers-auth.json or \
                 ~/.docker/config.json"
            )),
        }
    }

    /// Asks the token service at `realm` for a token of `scope`.
    fn request_token(
        &self,
        realm: &str,
        scope: &str,
        service: Option<&str>,
    ) -> Result<Response<Body>> {
        let resp = match self
            .credentials
            .as_ref()
            .and_then(|c| c.identity_token.as_deref())
        {
            // An identity token is a refresh token: exchanged by OAuth2's
            // POST, as docker does.
            Some(refresh) => {
                let mut form = vec![
                    ("grant_type", "refresh_token"),
                    ("refresh_token", refresh),
                    ("scope", scope),
                    ("client_id", "zinstall"),
                ];
                if let Some(service) = service {
                    form.push(("service", service));
                }
                self.agent
                    .post(realm)
                    .send_form(form)
                    .map_err(|e| http_error("POST", realm, e))?
            }
            None => {
                let mut req = self.agent.get(realm).query("scope", scope);
                if let Some(service) = service {
                    req = req.query("service", service);
                }
                if let Some(c) = &self.credentials {
                    req = req.header("Authorization", c.basic());
                }
                req.call().map_err(|e| http_error("GET", realm, e))?
            }
        };
        Ok(resp)
    }

    /// The token in the token service's answer, which must be one a
    /// header can carry.
    fn token_from(&self, realm: &str, resp: Response<Body>) -> Result<String> {
        let auth_err = |why: String| self.auth_err(why);
        if !resp.status().is_success() {
            return Err(auth_err(format!(
                "token from {realm}: {}",
                status_error(realm, resp, &self.watch)
            )));
        }
        let body = read_bounded(resp, realm, "token", MAX_TOKEN, &self.watch)?;
        #[derive(serde::Deserialize)]
        struct Granted {
            token: Option<String>,
            access_token: Option<String>,
        }
        let g: Granted = serde_json::from_slice(&body).map_err(|e| {
            auth_err(format!("token from {realm}: not JSON: {e}"))
        })?;
        let Some(t) = g.token.or(g.access_token).filter(|t| !t.is_empty())
        else {
            return Err(auth_err(format!("token from {realm}: no token")));
        };
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(auth_err(format!(
                "token from {realm}: not a header value"
            )));
        }
        Ok(t)
    }
}

impl Credentials {
    fn basic(&self) -> String {
        let raw = format!("{}:{}", self.user, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

/// `k="v", k2=v2` of a challenge.
fn challenge_params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let Some((k, v)) = rest.split_once('=') else {
            break;
        };
        let k = k.trim().trim_start_matches(',').trim().to_string();
        let v = v.trim_start();
        let (value, after) = if let Some(q) = v.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (q[..end].to_string(), &q[end + 1..]),
                None => (q.to_string(), ""),
            }
        } else {
            match v.find(',') {
                Some(end) => (v[..end].trim().to_string(), &v[end..]),
                None => (v.trim().to_string(), ""),
            }
        };
        out.push((k, value));
        rest = after.trim_start().trim_start_matches(',').trim_start();
    }
    out
}

pub(crate) fn http_error(op: &'static str, url: &str, e: ureq::Error) -> Error {
    Error::Http {
        op,
        url: url.to_string(),
        kind: Failure::of(&e),
        why: e.to_string(),
    }
}

/// A non-success answer as an error, with the registry's error text (as
/// much of it as comes, read as `watch` says).
pub(crate) fn status_error(
    url: &str,
    resp: Response<Body>,
    watch: &Watch,
) -> Error {
    let status = resp.status().as_u16();
    let mut detail = Vec::new();
    if let Ok(mut body) = watch.body_until(
        url,
        resp.into_body().into_reader().take(MAX_ERROR_SHOWN),
        Some(Instant::now() + watch.deadline),
    ) {
        while let Ok(chunk) = body.next() {
            if chunk.is_empty() {
                break;
            }
            detail.extend_from_slice(&chunk);
        }
    }
    let detail = String::from_utf8_lossy(&detail);
    // The distribution spec's errors: {"errors":[{"code","message"}]}.
    let shown = serde_json::from_str::<serde_json::Value>(&detail)
        .ok()
        .and_then(|v| {
            let errs = v.get("errors")?.as_array()?.clone();
            Some(
                errs.iter()
                    .map(|e| {
                        format!(
                            "{} {}",
                            e.get("code")
                                .and_then(|c| c.as_str())
                                .unwrap_or(""),
                            e.get("message")
                                .and_then(|c| c.as_str())
                                .unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })
        .unwrap_or_else(|| {
            detail
                .chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect()
        });
    Error::Status {
        url: url.to_string(),
        status,
        detail: shown.trim().to_string(),
    }
}

/// The body, refused past `limit` bytes without reading further; read
/// as `watch` says (cancel, stall rule), and whole within its deadline.
pub(crate) fn read_bounded(
    resp: Response<Body>,
    url: &str,
    what: &'static str,
    limit: u64,
    watch: &Watch,
) -> Result<Vec<u8>> {
    let until = Instant::now() + watch.deadline;
    read_bounded_until(resp, url, what, limit, watch, until)
}

/// [`read_bounded`], whole by `until` (a deadline that began before the
/// request).
pub(crate) fn read_bounded_until(
    resp: Response<Body>,
    url: &str,
    what: &'static str,
    limit: u64,
    watch: &Watch,
    until: Instant,
) -> Result<Vec<u8>> {
    if resp.body().content_length().is_some_and(|n| n > limit) {
        return Err(Error::TooLarge {
            url: url.to_string(),
            what,
            limit,
        });
    }
    let mut body = watch.body_until(
        url,
        resp.into_body().into_reader().take(limit + 1),
        Some(until),
    )?;
    let mut v = Vec::new();
    loop {
        let chunk = body.next()?;
        if chunk.is_empty() {
            break;
        }
        v.extend_from_slice(&chunk);
        if v.len() as u64 > limit {
            return Err(Error::TooLarge {
                url: url.to_string(),
                what,
                limit,
            });
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_with_quotes_and_commas() {
        let p = challenge_params(
            r#"realm="https://auth.example/token",service="reg.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(p[0], ("realm".into(), "https://auth.example/token".into()));
        assert_eq!(p[1], ("service".into(), "reg.example".into()));
        assert_eq!(p[2], ("scope".into(), "repository:a/b:pull,push".into()));
        let p = challenge_params("realm=x, service=y");
        assert_eq!(
            p,
            vec![("realm".into(), "x".into()), ("service".into(), "y".into())]
        );
    }
}
