//! Remembered relations: `CREATE EXTERNAL TABLE` and `CREATE VIEW` kept
//! in the catalog and re-created where they are first used.
//!
//! Opening a catalog builds none of them: a schema's
//! [`crate::schema::MatviewSchemaProvider`] builds a remembered relation
//! when a statement first names it ([`build_relation`]). An external table
//! read through DataFusion's listing table is kept with the schema,
//! partition columns and locations it had when it was created
//! ([`ResolvedTable`]), so building it reads no file and lists no folder,
//! and it means in every process what it meant in the one that created it.

use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::listing_table_factory::ListingTableFactory;
use datafusion::datasource::provider::DefaultTableFactory;
use datafusion::execution::SessionState;
use datafusion::logical_expr::CreateExternalTable;
use datafusion::optimizer::Analyzer;
use datafusion::optimizer::analyzer::type_coercion::TypeCoercion;

use super::*;
use crate::spec::{ResolvedLocation, ResolvedTable};

/// Builds the provider of a remembered relation under the defaults it was
/// created with, without registering it: an external table with its
/// resolved schema when the catalog keeps one (else inferred, as
/// DataFusion does), a plain view planned from its SQL against the
/// relations `state` resolves now.
pub(crate) async fn build_relation(
    state: SessionState,
    relation: &RelationEntry,
) -> Result<Arc<dyn TableProvider>> {
    // (Not `state_for`: building a table lists nothing, so there is no
    // listing to forget.)
    let state = crate::refresh::plan::with_defaults(
        state,
        &relation.default_catalog,
        &relation.default_schema,
    );
    match state.create_logical_plan(&relation.sql).await? {
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(mut create)) => {
            create.name = relation.name.to_table_reference();
            let file_type = create.file_type.to_uppercase();
            let factory = state
                .table_factories()
                .get(file_type.as_str())
                .cloned()
                .ok_or_else(|| {
                    Error::NotSupported(format!(
                        "no table factory for {} in this session",
                        create.file_type
                    ))
                })?;
            // DataFusion's own factories, which make the listing table (a
            // factory cannot be downcast; these have no state of their own,
            // so their debug forms name them).
            let debug = format!("{factory:?}");
            let listing = debug == format!("{:?}", DefaultTableFactory::new())
                || debug == format!("{:?}", ListingTableFactory::new());
            if let Some(resolved) = &relation.resolved
                && listing
            {
                return Ok(Arc::new(listing_table(&state, &create, resolved)?));
            }
            Ok(factory.create(&state, &create).await?)
        }
        LogicalPlan::Ddl(DdlStatement::CreateView(create)) => {
            // As DataFusion's CREATE VIEW keeps it.
            let input = Analyzer::with_rules(vec![Arc::new(TypeCoercion::new())])
                .execute_and_check(
                    Arc::unwrap_or_clone(create.input),
                    &datafusion::config::ConfigOptions::default(),
                    |_, _| {},
                )?;
            Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
                input,
                create.definition,
            )))
        }
        _ => Err(Error::NotSupported(format!(
            "remembered statement is not CREATE EXTERNAL TABLE or CREATE VIEW: {}",
            relation.sql
        ))),
    }
}

/// The listing table `create` made as it was resolved: what DataFusion's
/// [`ListingTableFactory`] makes from a statement that gives the columns,
/// with the locations, file pattern and extension it had.
fn listing_table(
    state: &SessionState,
    create: &CreateExternalTable,
    resolved: &ResolvedTable,
) -> Result<ListingTable> {
    let format = state
        .get_file_format_factory(&create.file_type)
        .ok_or_else(|| {
            Error::NotSupported(format!(
                "no file format {} in this session",
                create.file_type
            ))
        })?
        .create(state, &create.options)?;
    let schema = &resolved.schema;
    let partitions = &resolved.partition_columns;
    let partition_cols = partitions
        .iter()
        .map(|name| {
            Ok((
                name.clone(),
                schema.field_with_name(name)?.data_type().clone(),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let file_schema = Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .filter(|f| !partitions.contains(f.name()))
            .cloned()
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    );
    let paths = resolved
        .locations
        .iter()
        .map(|location| {
            let url = ListingTableUrl::parse(&location.url)?.with_table_ref(create.name.clone());
            match &location.glob {
                Some(glob) => url.with_glob(glob),
                None => Ok(url),
            }
        })
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let options = ListingOptions::new(format)
        .with_file_extension(&resolved.file_extension)
        .with_table_partition_cols(partition_cols)
        .with_file_sort_order(create.order_exprs.clone());
    let config = ListingTableConfig::new_with_multi_paths(paths)
        .with_listing_options(options)
        .with_schema(Arc::new(file_schema));
    Ok(ListingTable::try_new(config)?
        .with_cache(state.runtime_env().cache_manager.get_file_statistic_cache())
        .with_definition(create.definition.clone())
        .with_constraints(create.constraints.clone())
        .with_column_defaults(create.column_defaults.clone()))
}

/// The resolved form of `provider` when it is a listing table.
pub(crate) fn resolved_table(provider: &Arc<dyn TableProvider>) -> Option<ResolvedTable> {
    let table = (provider.as_ref() as &dyn std::any::Any).downcast_ref::<ListingTable>()?;
    Some(ResolvedTable {
        schema: table.schema().as_ref().clone(),
        partition_columns: table
            .options()
            .table_partition_cols
            .iter()
            .map(|(name, _)| name.clone())
            .collect(),
        locations: table
            .table_paths()
            .iter()
            .map(|url| ResolvedLocation {
                url: url.as_str().to_owned(),
                glob: url.get_glob().as_ref().map(|g| g.as_str().to_owned()),
            })
            .collect(),
        file_extension: table.options().file_extension.clone(),
    })
}

impl MatviewSession {
    /// After `statement` ran: remember the relation it created.
    pub(super) async fn remember(
        &self,
        statement: &DFStatement,
        text: Option<&str>,
        existed: bool,
    ) -> Result<()> {
        let (name, kind, if_not_exists) = match statement {
            DFStatement::CreateExternalTable(create) => (
                &create.name,
                RelationKind::ExternalTable,
                create.if_not_exists,
            ),
            DFStatement::Statement(inner) => match inner.as_ref() {
                SQLStatement::CreateView(view) if !view.materialized && !view.temporary => {
                    (&view.name, RelationKind::View, view.if_not_exists)
                }
                _ => return Ok(()),
            },
            _ => return Ok(()),
        };
        if existed && if_not_exists {
            return Ok(());
        }
        // A table over what was piped into this process (dfmv's and
        // datafusion-cli's `stdin://`) cannot come back in another one.
        if let DFStatement::CreateExternalTable(create) = statement
            && create.locations.iter().any(|l| {
                l.get(..8)
                    .is_some_and(|scheme| scheme.eq_ignore_ascii_case("stdin://"))
            })
        {
            return Ok(());
        }
        let (default_catalog, default_schema) = self.defaults();
        let text = text.map_or_else(|| statement.to_string(), str::to_owned);
        let (sql, withheld_options) = match kind {
            RelationKind::ExternalTable => {
                let (dialect, _) = crate::sql::parser_settings(&self.ctx);
                without_secret_options(&text, &dialect)?
            }
            RelationKind::View => (text, vec![]),
        };
        let name = self.resolve(name)?;
        let resolved = match kind {
            RelationKind::ExternalTable => self
                .registered(&name)
                .await?
                .as_ref()
                .and_then(resolved_table),
            RelationKind::View => None,
        };
        let entry = RelationEntry {
            name,
            kind,
            sql,
            default_catalog,
            default_schema,
            withheld_options,
            resolved,
        };
        self.catalog
            .commit(&IndexCommit::default().update(IndexUpdate::PutRelation(entry.clone())))
            .await?;
        self.applied(&entry.name, Some(&entry));
        if existed {
            // Plain views over what was replaced read the new definition,
            // as they do in every other process.
            self.unbind_remembered_views(Some(&entry.name))?;
        }
        Ok(())
    }

    /// Removes every remembered plain view but `except` from this session,
    /// so that each is planned again from its SQL, against the relations
    /// as they are then, when a statement next names it: after a relation
    /// they may read was created, replaced or dropped.
    pub(super) fn unbind_remembered_views(&self, except: Option<&QualifiedName>) -> Result<()> {
        let views = self
            .catalog
            .relations()
            .into_iter()
            .filter(|r| r.kind == RelationKind::View && Some(&r.name) != except);
        for view in views {
            self.deregister(&view.name)?;
            self.created_under().remove(&view.name);
        }
        Ok(())
    }
}
