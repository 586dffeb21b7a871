//! Resolving names against a session's catalogs: which relation a name is,
//! and which relations a plan reads.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::catalog::CatalogProviderList;
use datafusion::common::TableReference;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::LogicalPlan;

use crate::error::Result;
use crate::spec::QualifiedName;

/// The table registered under `name`, if any.
pub(crate) async fn registered(
    catalogs: &Arc<dyn CatalogProviderList>,
    name: &QualifiedName,
) -> Result<Option<Arc<dyn TableProvider>>> {
    match catalogs
        .catalog(&name.catalog)
        .and_then(|c| c.schema(&name.schema))
    {
        Some(schema) => Ok(schema.table(&name.name).await?),
        None => Ok(None),
    }
}

/// Fully qualified names of the existing tables and views `plan` scans,
/// resolving names as written under `catalog` and `schema` (table
/// functions are not relations and are left out). A plain view counts as
/// itself, not as what it reads.
pub(crate) async fn sources_of(
    catalogs: &Arc<dyn CatalogProviderList>,
    plan: &LogicalPlan,
    catalog: &str,
    schema: &str,
) -> Result<BTreeSet<QualifiedName>> {
    let resolve = |r: &TableReference| QualifiedName::from(r.clone().resolve(catalog, schema));
    // DataFusion inlines a plain view where it is read, as an alias of the
    // view's plan: find the aliases that are registered views...
    let mut aliases = BTreeSet::new();
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::SubqueryAlias(alias) = node {
            aliases.insert(resolve(&alias.alias));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let mut views = HashMap::new();
    for name in aliases {
        if let Some(table) = registered(catalogs, &name).await?
            && table.table_type() == TableType::View
            && let Some(view_plan) = table.get_logical_plan()
        {
            views.insert(name, view_plan.into_owned());
        }
    }
    // ...and take each as a source, not what it reads (unless it is a CTE
    // or subquery that happens to share the name: its plan differs).
    let mut scanned = BTreeSet::new();
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::SubqueryAlias(alias) => {
                let name = resolve(&alias.alias);
                if views.get(&name) == Some(alias.input.as_ref()) {
                    scanned.insert(name);
                    return Ok(TreeNodeRecursion::Jump);
                }
            }
            LogicalPlan::TableScan(scan) => {
                scanned.insert(resolve(&scan.table_name));
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let mut sources = BTreeSet::new();
    for name in scanned {
        if registered(catalogs, &name).await?.is_some() {
            sources.insert(name);
        }
    }
    Ok(sources)
}
