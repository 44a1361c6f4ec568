//! Roles: what a paired browser may do (docs/DECISIONS.md). Each pairing carries one,
//! chosen when its link is minted; studiod enforces them, the app only reflects them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, Code};

/// Ordered: each role may do what the ones before it may.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads everything, changes nothing.
    Viewer,
    /// Also runs, cancels, creates and edits schedules, applies declarations and decides
    /// approvals.
    Operator,
    /// Also deletes schedules, revokes other sessions and performs destructive operations.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// Whether this role may do what `needed` may.
    pub fn covers(self, needed: Role) -> bool {
        self >= needed
    }

    /// `403 forbidden` when a route needs more than this role ("this needs the operator
    /// role; this session is a viewer"), the one wording of both processes.
    pub fn refusal(self, needs: Role) -> Option<ApiError> {
        (!self.covers(needs)).then(|| {
            let article = if self == Role::Viewer { "a" } else { "an" };
            ApiError::new(
                Code::Forbidden,
                format!(
                    "this needs the {} role; this session is {article} {}",
                    needs.as_str(),
                    self.as_str()
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Role;

    #[test]
    fn each_role_covers_those_before_it() {
        assert!(Role::Admin.covers(Role::Operator) && Role::Admin.covers(Role::Viewer));
        assert!(Role::Operator.covers(Role::Viewer) && !Role::Operator.covers(Role::Admin));
        assert!(!Role::Viewer.covers(Role::Operator));
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("root"), None);
    }
}
