//! Names of relations: fully qualified, and as SQL text.

use super::*;

/// A fully qualified relation name: `catalog.schema.name`, case preserved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QualifiedName {
    /// Catalog part.
    pub catalog: String,
    /// Schema part.
    pub schema: String,
    /// Relation part.
    pub name: String,
}

impl QualifiedName {
    /// Builds a name from its three parts.
    pub fn new(
        catalog: impl Into<String>,
        schema: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            catalog: catalog.into(),
            schema: schema.into(),
            name: name.into(),
        }
    }

    /// The DataFusion reference for this name.
    pub fn to_table_reference(&self) -> TableReference {
        TableReference::full(
            self.catalog.as_str(),
            self.schema.as_str(),
            self.name.as_str(),
        )
    }

    /// The shortest name that means this relation under the given defaults,
    /// as PostgreSQL prints relation names in messages.
    pub fn short(&self, default_catalog: &str, default_schema: &str) -> String {
        if self.catalog == default_catalog && self.schema == default_schema {
            self.name.clone()
        } else if self.catalog == default_catalog {
            format!("{}.{}", self.schema, self.name)
        } else {
            self.to_string()
        }
    }

    /// [`Self::short`] with each part quoted when it needs it, as
    /// PostgreSQL names objects in notices and the DETAIL of errors.
    pub fn short_quoted(&self, default_catalog: &str, default_schema: &str) -> String {
        let mut parts = vec![];
        if self.catalog != default_catalog {
            parts.push(quote_ident(&self.catalog));
        }
        if self.catalog != default_catalog || self.schema != default_schema {
            parts.push(quote_ident(&self.schema));
        }
        parts.push(quote_ident(&self.name));
        parts.join(".")
    }
}

impl From<ResolvedTableReference> for QualifiedName {
    fn from(r: ResolvedTableReference) -> Self {
        Self::new(r.catalog.as_ref(), r.schema.as_ref(), r.table.as_ref())
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.catalog, self.schema, self.name)
    }
}

/// An identifier as SQL text, as PostgreSQL prints it in messages: bare
/// when it is a plain lower-case name, otherwise double-quoted (so its case
/// and characters are kept when it is parsed again).
pub fn quote_ident(ident: &str) -> String {
    let plain = ident
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && ident
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        ident.to_owned()
    } else {
        format!("\"{}\"", ident.replace('"', "\"\""))
    }
}
