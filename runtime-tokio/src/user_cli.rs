//! `narad user ...`: the `/v1/users` routes from the command line (docs/design.md §8). A password
//! is read from `--password-file` or from standard input (one line), never from the command line,
//! where any user of the machine could read it in the process list. The server's JSON is printed
//! as it came; a non-2xx answer is an error (message on stderr, exit code 1).

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::client::{print_answer, segment};
use crate::client_target::Target;

/// `narad user`: manage users and grants.
#[derive(Debug, Args)]
pub struct UserArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: UserAction,
}

#[derive(Debug, Subcommand)]
pub enum UserAction {
    /// Create a user, e.g. `narad user create billing --grant produce:orders.*`.
    Create {
        name: String,
        /// A grant, ACTION:TOPICS (repeatable): ACTION is produce, consume, create or admin;
        /// TOPICS a name, a prefix ending in `*`, or `*`. `admin` alone means `admin:*`.
        #[arg(long = "grant", value_name = "ACTION:TOPICS")]
        grants: Vec<String>,
        /// Read the password from this file (its first line); default: standard input.
        #[arg(long, value_name = "FILE")]
        password_file: Option<PathBuf>,
    },
    /// List every user (admins only).
    List,
    /// Show one user.
    Get { name: String },
    /// Delete a user (not yourself).
    Delete { name: String },
    /// Replace a user's grants (none given: no grants left).
    Grants {
        name: String,
        #[arg(long = "grant", value_name = "ACTION:TOPICS")]
        grants: Vec<String>,
    },
    /// Replace a user's password (an admin's, or your own).
    Password {
        name: String,
        /// Read the new password from this file (its first line); default: standard input.
        #[arg(long, value_name = "FILE")]
        password_file: Option<PathBuf>,
    },
}

/// Runs `narad user ...`.
pub fn run(args: UserArgs) -> anyhow::Result<()> {
    let base = args.target.base().to_string();
    let agent = crate::client::agent(&args.target)?;
    let json = |request: ureq::RequestBuilder<ureq::typestate::WithBody>,
                body: serde_json::Value| {
        request.header("content-type", "application/json").send(body.to_string())
    };
    let response = match args.action {
        UserAction::Create { name, grants, password_file } => {
            let password = read_password(password_file.as_ref())?;
            let body = serde_json::json!({ "name": name, "password": password, "grants": grants_json(&grants)? });
            json(agent.post(format!("{base}/v1/users")), body)
        }
        UserAction::List => agent.get(format!("{base}/v1/users")).call(),
        UserAction::Get { name } => agent.get(format!("{base}/v1/users/{}", segment(&name))).call(),
        UserAction::Delete { name } => {
            agent.delete(format!("{base}/v1/users/{}", segment(&name))).call()
        }
        UserAction::Grants { name, grants } => {
            let body = serde_json::json!({ "grants": grants_json(&grants)? });
            json(agent.put(format!("{base}/v1/users/{}/grants", segment(&name))), body)
        }
        UserAction::Password { name, password_file } => {
            let body = serde_json::json!({ "password": read_password(password_file.as_ref())? });
            json(agent.put(format!("{base}/v1/users/{}/password", segment(&name))), body)
        }
    };
    print_answer(response.with_context(|| format!("requesting {base}"))?)
}

/// `ACTION:TOPICS` arguments as the API's grant objects.
fn grants_json(grants: &[String]) -> anyhow::Result<serde_json::Value> {
    let mut out = Vec::new();
    for grant in grants {
        let value = match grant.split_once(':') {
            Some((action, topics)) => serde_json::json!({ "action": action, "topics": topics }),
            None if grant == "admin" => serde_json::json!({ "action": "admin" }),
            None => bail!("--grant {grant:?}: use ACTION:TOPICS, e.g. produce:orders.*"),
        };
        out.push(value);
    }
    Ok(serde_json::Value::Array(out))
}

/// The password: the first line of `file`, or of standard input.
fn read_password(file: Option<&PathBuf>) -> anyhow::Result<String> {
    let line = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --password-file {}", path.display()))?;
            text.lines().next().unwrap_or_default().to_string()
        }
        None => {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).context("reading the password")?;
            line.trim_end_matches(['\n', '\r']).to_string()
        }
    };
    if line.is_empty() {
        bail!("no password given (--password-file FILE, or one line on standard input)");
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_written_as_the_api_takes_them() {
        let grants = ["produce:orders.*".to_string(), "admin".to_string()];
        let json = grants_json(&grants).expect("valid");
        let expected = serde_json::json!([
            { "action": "produce", "topics": "orders.*" },
            { "action": "admin" }
        ]);
        assert_eq!(json, expected);
        assert!(grants_json(&["produce".to_string()]).is_err());
    }
}
