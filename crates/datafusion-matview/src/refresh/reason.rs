//! Why a refresh recomputes a view whole, typed: the cost model and
//! `EXPLAIN REFRESH` read the variant, the REFRESH result's `detail` column
//! shows its words.

use std::fmt;

use super::decide::Estimate;

/// Why a view's query is not refreshed incrementally: its shape, whatever
/// changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotIncremental {
    /// `GROUPING SETS`, `ROLLUP` or `CUBE`.
    GroupingSets,
    /// A subquery in `HAVING` or in a column computed from aggregates.
    SubqueryOverAggregate,
    /// An aggregate expression that is not a plain call.
    AggregateExpression,
    /// `f(DISTINCT ...)`.
    Distinct {
        /// The aggregate function.
        function: String,
    },
    /// `f(... ORDER BY ...)`.
    Ordered {
        /// The aggregate function.
        function: String,
    },
    /// `avg()` of another type than `Float64`.
    AvgOfType {
        /// Its output type.
        output: String,
    },
    /// An output column has the name of the state kept for another.
    StateNameTaken {
        /// The column whose state would be shadowed.
        column: String,
    },
    /// An aggregate function with no merge rule.
    CannotMerge {
        /// The aggregate function.
        function: String,
    },
    /// Planning the aggregate's state failed (DataFusion's message).
    Planning(String),
    /// A subquery reads the changed table.
    Subquery {
        /// The table.
        source: String,
    },
    /// A `UNION ALL` branch does not read the changed table: over the new
    /// files alone it would give all its rows again.
    UnionBranch {
        /// The table.
        source: String,
    },
    /// The changed table is joined with itself.
    SelfJoin {
        /// The table.
        source: String,
    },
    /// A join that does not keep the changed table's rows one by one.
    Join {
        /// The join type, in lower case (`full`, `left anti`, ...).
        join: String,
        /// The table.
        source: String,
    },
    /// A plan node over the changed table that is not row-wise.
    Node {
        /// The node's kind (`Window`, `Distinct`, `Limit`, ...).
        kind: String,
    },
}

impl fmt::Display for NotIncremental {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not incremental: ")?;
        match self {
            Self::GroupingSets => f.write_str("GROUPING SETS, ROLLUP or CUBE"),
            Self::SubqueryOverAggregate => f.write_str("a subquery over the aggregate"),
            Self::AggregateExpression => f.write_str("an aggregate expression"),
            Self::Distinct { function } => write!(f, "{function}(DISTINCT ...) cannot be merged"),
            Self::Ordered { function } => {
                write!(f, "{function}(... ORDER BY ...) cannot be merged")
            }
            Self::AvgOfType { output } => write!(f, "avg() returning {output} cannot be merged"),
            Self::StateNameTaken { column } => {
                write!(f, "a column is named like the state kept for \"{column}\"")
            }
            Self::CannotMerge { function } => write!(f, "{function}() cannot be merged"),
            Self::Planning(message) => f.write_str(message),
            Self::Subquery { source } => write!(f, "a subquery reads {source}"),
            Self::UnionBranch { source } => {
                write!(f, "a UNION ALL branch does not read {source}")
            }
            Self::SelfJoin { source } => write!(f, "{source} is joined with itself"),
            Self::Join { join, source } => {
                write!(
                    f,
                    "a {join} join does not keep the rows of {source} one by one"
                )
            }
            Self::Node { kind } => f.write_str(kind),
        }
    }
}

/// Why a stale view is recomputed whole rather than incrementally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FullReason {
    /// The query's shape (see [`NotIncremental`]).
    Shape(NotIncremental),
    /// A relation on the path has no definition recorded at the last
    /// refresh.
    DefinitionNotRecorded {
        /// The relation.
        relation: String,
    },
    /// A relation on the path was redefined.
    Redefined {
        /// The relation.
        relation: String,
    },
    /// The sources were replaced by others.
    SourcesReplaced,
    /// More than one table changed.
    SeveralChanged {
        /// The tables.
        tables: Vec<String>,
    },
    /// Several tables changed, not all only by appended files.
    SeveralNotAppended {
        /// The tables.
        tables: Vec<String>,
    },
    /// A materialized view it reads was emptied or first populated.
    ViewEmptiedOrPopulated {
        /// The view.
        view: String,
    },
    /// The changed relation is not a file-backed table.
    NotFileBacked {
        /// The relation.
        relation: String,
    },
    /// The changed table is Hive-partitioned and the refresh runs on a
    /// cluster, whose executors cannot read some of its files apart.
    PartitionedOnCluster {
        /// The table.
        table: String,
    },
    /// The changed materialized view has no data.
    NoData {
        /// The view.
        view: String,
    },
    /// The changed relation is not a table of the session.
    NotATable {
        /// The relation.
        relation: String,
    },
    /// The query's scan of the changed table cannot be found.
    ScanNotFound {
        /// The table.
        source: String,
    },
    /// Files were removed or rewritten under an aggregate.
    RowsRemovedFromAggregate {
        /// What changed (`t: 1 file(s) removed`).
        change: String,
    },
    /// The current data holds no aggregate state to merge into.
    NoStateToMerge,
    /// The view computes over its aggregate (`HAVING`, expressions of
    /// aggregates) and keeps no partial aggregates to merge.
    NoPartials {
        /// What changed.
        change: String,
    },
    /// The table changed in another way than files appended.
    SourceChanged {
        /// The table.
        source: String,
    },
    /// Computing only what changed would cost more than half of what
    /// recomputing does.
    NotCheaper {
        /// What changed.
        change: String,
        /// What the cost rule compared.
        estimate: Estimate,
    },
    /// Files removed or rewritten in a table of a view over several that
    /// keeps lineage for none (the others were not small beside the
    /// largest, or the data was written before lineage over joins).
    NoLineageOverSeveral {
        /// What changed.
        change: String,
    },
    /// Files removed or rewritten in a table other than the one the
    /// view's lineage follows.
    LineageOfAnother {
        /// What changed.
        change: String,
        /// The table the lineage follows.
        table: String,
    },
    /// The current data files have no lineage.
    NoLineage {
        /// What changed.
        change: String,
    },
    /// A view computed by partition (its windows partition by these
    /// columns of the table's Hive partitions), and a file whose path
    /// does not show its partition.
    PartitionNotInPath {
        /// What changed.
        change: String,
        /// The partition columns.
        columns: String,
    },
    /// No file of the table is left.
    NothingLeft {
        /// What changed.
        change: String,
    },
    /// The view's partial aggregates would be in too many pieces.
    PartialsFragmented {
        /// What changed.
        change: String,
        /// How many there would be.
        pieces: usize,
    },
}

impl fmt::Display for FullReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape(why) => why.fmt(f),
            Self::DefinitionNotRecorded { relation } => write!(
                f,
                "the definition of {relation} was not recorded at the last refresh"
            ),
            Self::Redefined { relation } => write!(f, "{relation} was redefined"),
            Self::SourcesReplaced => f.write_str("its sources were replaced"),
            Self::SeveralChanged { tables } => write!(f, "{} changed", tables.join(" and ")),
            Self::SeveralNotAppended { tables } => write!(
                f,
                "{} changed, with files removed or rewritten: lineage is kept for one changed table only",
                tables.join(" and ")
            ),
            Self::ViewEmptiedOrPopulated { view } => {
                write!(
                    f,
                    "{view} is a materialized view that was emptied or populated"
                )
            }
            Self::NotFileBacked { relation } => write!(f, "{relation} is not a file-backed table"),
            Self::PartitionedOnCluster { table } => write!(
                f,
                "{table} is partitioned, and on a cluster its files are not read apart"
            ),
            Self::NoData { view } => write!(f, "{view} has no data"),
            Self::NotATable { relation } => write!(f, "{relation} is not a table"),
            Self::ScanNotFound { source } => write!(
                f,
                "the query's scan of {source} cannot be told apart from its other relations"
            ),
            Self::RowsRemovedFromAggregate { change } => {
                write!(f, "{change}; rows cannot be taken back out of an aggregate")
            }
            Self::NoStateToMerge => f.write_str("the current data holds no state to merge into"),
            Self::NoPartials { change } => write!(
                f,
                "{change}; the view filters or computes columns over its aggregate, and keeps no partial aggregates to recompute it from"
            ),
            Self::SourceChanged { source } => write!(f, "{source} changed"),
            Self::NotCheaper { change, estimate } => write!(
                f,
                "{change}; computing only that would cost {:.0}% of recomputing",
                estimate.share()
            ),
            Self::NoLineageOverSeveral { change } => write!(
                f,
                "{change}; the view reads several tables and keeps lineage for none"
            ),
            Self::LineageOfAnother { change, table } => {
                write!(
                    f,
                    "{change}; the view's lineage follows {table}, not this table"
                )
            }
            Self::NoLineage { change } => write!(f, "{change}; the current data has no lineage"),
            Self::PartitionNotInPath { change, columns } => write!(
                f,
                "{change}; a file's path does not show its partition of {columns}"
            ),
            Self::NothingLeft { change } => write!(f, "{change}; no file of it is left"),
            Self::PartialsFragmented { change, pieces } => write!(
                f,
                "{change}; its partial aggregates would be in {pieces} pieces, regrouped"
            ),
        }
    }
}

impl FullReason {
    /// What the cost rule compared, when it is what ruled incremental out.
    pub(crate) fn estimate(&self) -> Option<Estimate> {
        match self {
            Self::NotCheaper { estimate, .. } => Some(*estimate),
            _ => None,
        }
    }
}

impl From<NotIncremental> for FullReason {
    fn from(why: NotIncremental) -> Self {
        FullReason::Shape(why)
    }
}
