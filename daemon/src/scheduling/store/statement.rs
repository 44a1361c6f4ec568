//! A statement built from fragments, for the reads whose filters vary: each fragment's
//! `?` marks become the next `$1`, `$2`, … and each value is bound as its mark is
//! pushed, so the text and its values cannot drift apart, and the same statement serves
//! SQLite and PostgreSQL (which takes no `?` and no unbound number).

use sqlx::{Any, Arguments, Encode, Type, any::AnyArguments};

/// See the module.
pub(in crate::scheduling) struct Statement {
    text: String,
    args: AnyArguments,
    marks: usize,
    error: Option<sqlx::error::BoxDynError>,
}

impl Statement {
    /// A statement that starts with `head` (which holds no mark).
    pub(super) fn new(head: impl Into<String>) -> Self {
        let text = head.into();
        debug_assert!(!text.contains('?'), "the head holds no mark: {text}");
        Self {
            text,
            args: AnyArguments::default(),
            marks: 0,
            error: None,
        }
    }

    /// Appends `fragment`, its `?` marks numbered on from the last.
    pub(super) fn push(&mut self, fragment: &str) -> &mut Self {
        for (i, part) in fragment.split('?').enumerate() {
            if i > 0 {
                self.marks += 1;
                self.text.push('$');
                self.text.push_str(&self.marks.to_string());
            }
            self.text.push_str(part);
        }
        self
    }

    /// Binds the next mark's value.
    pub(super) fn bind<'q, T: Encode<'q, Any> + Type<Any> + 'q>(&mut self, value: T) -> &mut Self {
        if let Err(e) = self.args.add(value) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// The query as `dialect` reads it, every mark bound (a value that could not be
    /// encoded is the error).
    pub(super) fn query(
        self,
        dialect: studio_store::Dialect,
    ) -> Result<sqlx::query::Query<'static, Any, AnyArguments>, sqlx::Error> {
        debug_assert_eq!(
            self.marks,
            self.args.len(),
            "one value per mark: {}",
            self.text
        );
        match self.error {
            None => Ok(sqlx::query_with(
                super::dialect::adapt(dialect, self.text),
                self.args,
            )),
            Some(e) => Err(sqlx::Error::Encode(e)),
        }
    }

    /// The text so far, for a query plan in tests.
    #[cfg(test)]
    pub(in crate::scheduling) fn text(&self) -> &str {
        &self.text
    }

    /// How many marks it holds.
    #[cfg(test)]
    pub(in crate::scheduling) fn marks(&self) -> usize {
        self.marks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_numbered_in_the_order_fragments_are_pushed() {
        let mut s = Statement::new("SELECT x FROM t WHERE TRUE");
        s.push(" AND a = ?").bind(1_i64);
        s.push(" AND (b < ? OR (b = ? AND id < ?))")
            .bind(2_i64)
            .bind(2_i64)
            .bind("z".to_owned());
        s.push(" LIMIT ?").bind(10_i64);
        assert_eq!(
            s.text(),
            "SELECT x FROM t WHERE TRUE AND a = $1 AND (b < $2 OR (b = $3 AND id < $4)) LIMIT $5"
        );
    }
}
